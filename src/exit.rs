//! The exit codes of every command (docs/cli.md): the one table, used by `main` and by the places
//! that must quit at once (a second signal).

/// `0` success; `1` the task ended without success; `2` invalid input; `3` the daemon or a backend could
/// not be reached; `130` a second interrupt quit at once (128 + SIGINT, as shells report it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success = 0,
    Unsuccessful = 1,
    InvalidInput = 2,
    Unreachable = 3,
    Interrupted = 130,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Ends the process now with this code, without unwinding or waiting for anything (a second signal).
    pub fn now(self) -> ! {
        std::process::exit(i32::from(self.code()))
    }
}
