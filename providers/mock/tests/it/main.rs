//! Integration tests of the mock desktop, driven only through its public API and the `ComputerProvider` trait.

mod flows;
mod persistence;
mod rendering;
mod robustness;
mod scenes;
mod support;
mod widgets;
