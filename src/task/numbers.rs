//! The validated numbers of a task file: `Positive` (at least 1), `Bounded` (from `MIN` to `MAX`), `Limit`
//! (from 1 to `MAX`) and `Cost` (dollars, finite and not negative). Each refuses a value out of range while it
//! is deserialized, so the error carries the field path and position.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// An integer from `MIN` to `MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Bounded<T, const MIN: u64, const MAX: u64>(T);

impl<T: Copy, const MIN: u64, const MAX: u64> Bounded<T, MIN, MAX> {
    pub fn get(self) -> T {
        self.0
    }
}

impl<'de, T, const MIN: u64, const MAX: u64> Deserialize<'de> for Bounded<T, MIN, MAX>
where
    T: Deserialize<'de> + Copy + Into<u64> + fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        if v.into() < MIN {
            return Err(serde::de::Error::custom(format!("must be at least {MIN}, got {v}")));
        }
        if v.into() > MAX {
            return Err(serde::de::Error::custom(format!("must be at most {MAX}, got {v}")));
        }
        Ok(Self(v))
    }
}

/// An integer that must be at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Positive<T>(T);

impl<T: Copy> Positive<T> {
    pub fn get(self) -> T {
        self.0
    }
}

impl<'de, T> Deserialize<'de> for Positive<T>
where
    T: Deserialize<'de> + PartialOrd + From<u8> + fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        if v < T::from(1u8) {
            return Err(serde::de::Error::custom(format!("must be at least 1, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A limit: an integer from 1 to `MAX` (so that no deadline or counter built from it can overflow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Limit<T, const MAX: u64>(T);

impl<T: Copy, const MAX: u64> Limit<T, MAX> {
    pub fn get(self) -> T {
        self.0
    }
}

impl<'de, T, const MAX: u64> Deserialize<'de> for Limit<T, MAX>
where
    T: Deserialize<'de> + Copy + Into<u64> + fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        if v.into() < 1 {
            return Err(serde::de::Error::custom(format!("must be at least 1, got {v}")));
        }
        if v.into() > MAX {
            return Err(serde::de::Error::custom(format!("must be at most {MAX}, got {v}")));
        }
        Ok(Self(v))
    }
}

/// A cost in US dollars: finite and not negative.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Cost(f64);

impl Cost {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !v.is_finite() || v < 0.0 {
            return Err(serde::de::Error::custom(format!("must be a non-negative number of dollars, got {v}")));
        }
        Ok(Self(v))
    }
}
