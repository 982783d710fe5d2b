//! Requests from the network never panic the key-value service: random bytes are answered
//! with a reply that decodes, and change nothing unless they decode to a command.
use logless_btree::{KvCommand, KvReply, KvService};
use logless_service::{Service, Wire};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_get_a_reply(bytes: Vec<u8>) {
        let mut kv = KvService::new();
        let before = kv.digest();
        let _group = kv.group_of_encoded(&bytes, 3);
        let reply = KvReply::decode(&kv.execute_encoded(&bytes));
        prop_assert!(reply.is_ok());
        if KvCommand::decode(&bytes).is_err() {
            prop_assert!(matches!(reply, Ok(KvReply::Malformed(_))));
            prop_assert_eq!(kv.digest(), before);
        }
    }
}
