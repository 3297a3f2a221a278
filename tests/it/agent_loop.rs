//! The agent loop in-process, against test doubles that each fail in one named way.
