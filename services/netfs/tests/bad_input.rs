//! Requests from the network never panic NetFS: random bytes, and valid frames whose plain
//! encoding is random, are answered with a reply that decodes; what does not decode is
//! answered `Malformed` and changes nothing.
use logless_netfs::frame;
use logless_netfs::{FsCommand, FsReply, NetFs};
use logless_service::{Service, Wire};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_get_a_reply(bytes: Vec<u8>) {
        let mut fs = NetFs::new();
        let before = fs.digest();
        let reply = FsReply::decode(&fs.execute_encoded(&bytes));
        prop_assert!(reply.is_ok());
        if FsCommand::decode(&bytes).is_err() {
            prop_assert!(matches!(reply, Ok(FsReply::Malformed(_))), "{:?}", reply);
            prop_assert_eq!(fs.digest(), before);
        }
    }

    #[test]
    fn random_plain_requests_in_valid_frames_never_panic(tag in 0u8..20, rest: Vec<u8>) {
        let mut plain = vec![tag];
        plain.extend(rest);
        let mut request = Vec::new();
        frame::compress(&plain, &mut request);
        let mut fs = NetFs::new();
        let _group = fs.group_of_encoded(&request, 3);
        prop_assert!(FsReply::decode(&fs.execute_encoded(&request)).is_ok());
    }
}
