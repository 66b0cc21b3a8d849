//! The queue engine's model: see main.rs.
