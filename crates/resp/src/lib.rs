//! logless-resp.
