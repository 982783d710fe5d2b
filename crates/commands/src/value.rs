//! Register values.
