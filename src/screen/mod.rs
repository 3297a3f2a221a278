//! Screen geometry and pixels, the vocabulary every layer may use: the one place coordinates change space
//! ([`coords::CoordinateMap`]), and screenshot processing between capture and use (scaling, PNG encoding,
//! and [`image::ModelImage`], an encoded screenshot as a model sees it). Knows nothing of tasks, models or
//! storage.

pub mod compare;
pub mod coords;
pub mod image;

pub use coords::{CoordinateMap, fit_within};
pub use image::ModelImage;
