//! Which failed calls the server never processed: the calls gRPC's transparent retry (grpc-go,
//! the drivers' client) sends again by itself, because doing so cannot repeat anything.

use tonic::Status;

/// Whether the call behind `status` never reached the server's handler: its HTTP/2 stream was
/// refused (`REFUSED_STREAM`), or lay beyond the last stream a server's GOAWAY said it would
/// process, or the call was taken back before it was written because its connection closed
/// first (hyper's `Canceled`, as after a GOAWAY). Such a call is safe to send again on a new
/// connection, as grpc-go does; any other failure may have been processed and is the caller's
/// to judge.
pub fn never_processed(status: &Status) -> bool {
    let mut src = std::error::Error::source(status);
    while let Some(e) = src {
        if let Some(h2) = e.downcast_ref::<h2::Error>()
            && (h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.is_remote()))
        {
            return true;
        }
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        src = e.source();
    }
    false
}
