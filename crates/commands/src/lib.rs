//! logless-commands.
pub mod command;
pub mod value;
