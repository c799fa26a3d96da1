//! The shared walk on a tiny in-memory type graph.
