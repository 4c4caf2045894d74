//! The one error type every service and host returns.
//!
//! An [`Error`] carries a [`Kind`] (which the server turns into a gRPC status code in one place)
//! and a message that names the operation, the object and the cause, for example
//! `Mkdir "/var/lib/kubelet/pods/x": permission denied (os error 13)`.

use std::fmt;
use std::io;

/// What went wrong, coarsely; each kind maps to one gRPC status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The request itself is malformed (bad path, empty ID, out-of-range number).
    InvalidArgument,
    /// The object named by the request does not exist.
    NotFound,
    /// The object to be created exists already (and that is not an idempotent success).
    AlreadyExists,
    /// The host is not in a state where the operation is allowed (data would be lost, disk in use).
    FailedPrecondition,
    /// The request may not touch this object (outside the allowed roots, a protected root).
    PermissionDenied,
    /// A transient condition; retrying later may succeed.
    Unavailable,
    /// The caller's deadline passed.
    DeadlineExceeded,
    /// Another operation on the same object is running; retry.
    Aborted,
    /// A limit of the daemon's is reached (too many callers waiting for one disk); retry later.
    ResourceExhausted,
    /// This RPC is not implemented on this host (yet).
    Unimplemented,
    /// A bug or an unexpected host failure.
    Internal,
}

/// A failed operation: its kind and a message naming operation, object and cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: Kind,
    message: String,
}

/// Result alias used across services and hosts.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error about operation `op` on `object` because of `cause`.
    pub fn new(kind: Kind, op: &str, object: impl fmt::Display, cause: impl fmt::Display) -> Self {
        Self {
            kind,
            message: format!("{op} {object}: {cause}"),
        }
    }

    /// An error whose message is already complete.
    pub fn with_message(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for [`Kind::InvalidArgument`].
    pub fn invalid(op: &str, object: impl fmt::Display, cause: impl fmt::Display) -> Self {
        Self::new(Kind::InvalidArgument, op, object, cause)
    }

    /// An OS error from operation `op` on `object`, with its kind derived from the OS error.
    pub fn io(op: &str, object: impl fmt::Display, err: &io::Error) -> Self {
        Self::new(io_kind(err), op, object, err)
    }

    /// The RPC is served but the host behind it does not implement it: what the test doubles in
    /// `testing` answer for the RPCs they leave out (production hosts implement every RPC).
    pub fn unimplemented(group: &str, rpc: &str) -> Self {
        Self::with_message(
            Kind::Unimplemented,
            format!("{group} {rpc}: not implemented on this host yet"),
        )
    }

    /// The kind, which decides the gRPC status code.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The full message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message with the path a host was given (`os_path`, which names a held directory)
    /// shown as the request's path, keeping the kind.
    pub fn shown_as(mut self, os_path: &str, shown: &str) -> Self {
        if os_path != shown {
            self.message = self.message.replace(os_path, shown);
        }
        self
    }

    /// Prefixes the message with more context, keeping the kind.
    pub fn context(mut self, prefix: impl fmt::Display) -> Self {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

/// Maps an OS error to the kind a client can act on.
pub fn io_kind(err: &io::Error) -> Kind {
    use io::ErrorKind as E;
    // ENXIO and ENODEV: the device behind a node or handle is gone (detached meanwhile).
    #[cfg(unix)]
    if matches!(err.raw_os_error(), Some(6 | 19)) {
        return Kind::NotFound;
    }
    match err.kind() {
        E::NotFound => Kind::NotFound,
        E::PermissionDenied | E::ReadOnlyFilesystem => Kind::PermissionDenied,
        E::AlreadyExists => Kind::AlreadyExists,
        // InvalidData is what the host read being malformed (a mount table, a device's
        // answer), not the request: the caller cannot fix it, so it is not INVALID_ARGUMENT.
        E::InvalidInput | E::InvalidFilename => Kind::InvalidArgument,
        E::DirectoryNotEmpty
        | E::NotADirectory
        | E::IsADirectory
        | E::ResourceBusy
        | E::CrossesDevices
        | E::StorageFull
        | E::QuotaExceeded
        | E::FileTooLarge
        | E::TooManyLinks
        | E::ExecutableFileBusy => Kind::FailedPrecondition,
        // An OS call timing out (ETIMEDOUT: a device, a server) is worth a retry; the caller's
        // own deadline is DEADLINE_EXCEEDED, decided where the deadline is known.
        E::TimedOut | E::Interrupted | E::WouldBlock | E::OutOfMemory => Kind::Unavailable,
        E::Unsupported => Kind::Unimplemented,
        _ => Kind::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_operation_object_and_cause() {
        let e = Error::io(
            "Mkdir",
            "\"/x\"",
            &io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert_eq!(e.kind(), Kind::PermissionDenied);
        assert!(e.message().starts_with("Mkdir \"/x\": "), "{}", e.message());
        let e = Error::io("Rmdir", "\"/y\"", &io::Error::from_raw_os_error(39));
        assert_eq!(e.kind(), Kind::FailedPrecondition, "ENOTEMPTY on Linux");
    }

    #[test]
    fn errors_map_to_what_the_caller_can_do() {
        let kind = |e: io::Error| io_kind(&e);
        assert_eq!(kind(io::ErrorKind::InvalidData.into()), Kind::Internal);
        assert_eq!(kind(io::ErrorKind::TimedOut.into()), Kind::Unavailable);
        assert_eq!(
            kind(io::ErrorKind::InvalidInput.into()),
            Kind::InvalidArgument
        );
        #[cfg(unix)]
        {
            assert_eq!(
                kind(io::Error::from_raw_os_error(6)),
                Kind::NotFound,
                "ENXIO"
            );
            assert_eq!(
                kind(io::Error::from_raw_os_error(19)),
                Kind::NotFound,
                "ENODEV"
            );
            assert_eq!(
                kind(io::Error::from_raw_os_error(110)),
                Kind::Unavailable,
                "ETIMEDOUT"
            );
            assert_eq!(
                kind(io::Error::from_raw_os_error(16)),
                Kind::FailedPrecondition,
                "EBUSY"
            );
        }
    }

    #[test]
    fn unimplemented_names_group_and_rpc() {
        let e = Error::unimplemented("disk", "PartitionDisk");
        assert_eq!(e.kind(), Kind::Unimplemented);
        assert!(e.message().contains("disk PartitionDisk"));
    }
}
