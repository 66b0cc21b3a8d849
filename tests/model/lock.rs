//! The plain lock's model: see main.rs.
