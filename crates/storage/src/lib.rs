//! logless-storage.
