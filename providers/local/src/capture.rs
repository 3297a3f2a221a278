//! Shared-memory capture (MIT-SHM): a memory segment both agentd and the X server map, so a screenshot is
//! one `ShmGetImage` request whose pixels never cross the socket.
//!
//! The segment is a `memfd` handed to the server with `ShmAttachFd` (MIT-SHM 1.2): it has no SysV IPC key
//! to leak if agentd dies, and it is freed when both sides let go. A server that cannot take it (a remote
//! display over TCP, MIT-SHM older than 1.2) falls back to plain `GetImage` through the socket.

use std::os::fd::{FromRawFd, OwnedFd};

use x11rb::connection::Connection;
use x11rb::protocol::shm::{self, ConnectionExt as _};

/// A shared-memory segment attached to the X server, mapped read-only into this process.
pub struct ShmSegment {
    pub seg: shm::Seg,
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; it is only read through `&self` after the server
// has finished writing (a `ShmGetImage` reply has arrived), and the value is moved between threads whole.
unsafe impl Send for ShmSegment {}

impl ShmSegment {
    /// Creates a segment of `len` bytes and attaches it to the server. `Ok(None)`: the server cannot use
    /// shared memory this way (the caller falls back to `GetImage`).
    pub fn attach(conn: &impl Connection, len: usize) -> Result<Option<Self>, x11rb::errors::ReplyOrIdError> {
        let Some(version) = shm_version(conn) else {
            return Ok(None);
        };
        if version < (1, 2) {
            return Ok(None);
        }
        let Some((fd, ptr)) = map_memfd(len) else {
            return Ok(None);
        };
        let seg = conn.generate_id()?;
        // The server keeps its own reference to the memory; ours is the mapping.
        match conn.shm_attach_fd(seg, fd, false)?.check() {
            Ok(()) => Ok(Some(Self { seg, ptr, len })),
            Err(x11rb::errors::ReplyError::X11Error(e)) => {
                tracing::debug!(error = ?e.error_kind, "ShmAttachFd refused; capturing with GetImage");
                // SAFETY: `ptr`/`len` come from the successful mmap above and nothing else uses them.
                unsafe { libc::munmap(ptr, len) };
                Ok(None)
            }
            Err(x11rb::errors::ReplyError::ConnectionError(e)) => {
                // SAFETY: as above.
                unsafe { libc::munmap(ptr, len) };
                Err(e.into())
            }
        }
    }

    /// The segment's size in bytes.
    pub fn size(&self) -> usize {
        self.len
    }

    /// The first `len` bytes of the segment. Only meaningful after a `ShmGetImage` reply.
    pub fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: the mapping is `self.len` bytes long and lives as long as `self`; the server writes into it
        // only while a `ShmGetImage` request is being processed, and the caller reads after the reply.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), len.min(self.len)) }
    }

    /// Detaches the segment from the server (best effort; the server also detaches when we disconnect).
    pub fn detach(self, conn: &impl Connection) {
        let _ = conn.shm_detach(self.seg);
        drop(self);
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe the mapping created in `attach`, unmapped exactly once here.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn shm_version(conn: &impl Connection) -> Option<(u16, u16)> {
    conn.extension_information(shm::X11_EXTENSION_NAME).ok().flatten()?;
    let reply = conn.shm_query_version().ok()?.reply().ok()?;
    Some((reply.major_version, reply.minor_version))
}

/// An anonymous memory file of `len` bytes and a read-only shared mapping of it.
fn map_memfd(len: usize) -> Option<(OwnedFd, *mut libc::c_void)> {
    // SAFETY: plain libc calls with valid arguments; every failure is checked and the fd is owned at once.
    unsafe {
        let raw = libc::memfd_create(c"agentd-x11-capture".as_ptr(), libc::MFD_CLOEXEC);
        if raw < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(raw);
        if libc::ftruncate(raw, len as libc::off_t) != 0 {
            return None;
        }
        let ptr = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, raw, 0);
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some((fd, ptr))
    }
}
