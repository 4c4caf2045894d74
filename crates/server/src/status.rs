//! The one place where a core [`Error`] becomes a gRPC [`Status`].

use csi_proxy_core::{Error, Kind};
use tonic::{Code, Status};

/// The gRPC code for an error kind. Upstream answered UNKNOWN for everything; clients only test
/// for non-OK, so precise codes stay compatible.
pub fn code(kind: Kind) -> Code {
    match kind {
        Kind::InvalidArgument => Code::InvalidArgument,
        Kind::NotFound => Code::NotFound,
        Kind::AlreadyExists => Code::AlreadyExists,
        Kind::FailedPrecondition => Code::FailedPrecondition,
        Kind::PermissionDenied => Code::PermissionDenied,
        Kind::Unavailable => Code::Unavailable,
        Kind::DeadlineExceeded => Code::DeadlineExceeded,
        Kind::Aborted => Code::Aborted,
        Kind::ResourceExhausted => Code::ResourceExhausted,
        Kind::Unimplemented => Code::Unimplemented,
        Kind::Internal => Code::Internal,
    }
}

/// Converts a core error into the status sent to the client.
pub fn to_status(err: &Error) -> Status {
    Status::new(code(err.kind()), err.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_precise_code() {
        let kinds = [
            (Kind::InvalidArgument, Code::InvalidArgument),
            (Kind::NotFound, Code::NotFound),
            (Kind::AlreadyExists, Code::AlreadyExists),
            (Kind::FailedPrecondition, Code::FailedPrecondition),
            (Kind::PermissionDenied, Code::PermissionDenied),
            (Kind::Unavailable, Code::Unavailable),
            (Kind::DeadlineExceeded, Code::DeadlineExceeded),
            (Kind::Aborted, Code::Aborted),
            (Kind::ResourceExhausted, Code::ResourceExhausted),
            (Kind::Unimplemented, Code::Unimplemented),
            (Kind::Internal, Code::Internal),
        ];
        for (kind, want) in kinds {
            let s = to_status(&Error::with_message(kind, "op obj: cause"));
            assert_eq!(s.code(), want);
            assert_ne!(s.code(), Code::Unknown);
            assert_eq!(s.message(), "op obj: cause");
        }
    }
}
