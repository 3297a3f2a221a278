//! Fake vendor servers for tests and benchmarks (filled in below).
