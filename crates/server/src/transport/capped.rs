//! A connection holding its place under the connection caps ([`crate::limits::ConnectionCaps`])
//! for as long as it lives.

use crate::limits::{ConnectionCaps, ConnectionPlace};
use std::io;
use tokio_stream::Stream;

/// A connection and its place; dropping it gives the place back.
pub struct Capped<IO> {
    io: IO,
    _place: ConnectionPlace,
}

read_through!(Capped);
write_through_wrapper!(Capped);

/// The accepted connections of `endpoint` that fit under `caps`; the others are closed as they
/// are accepted (so they hold no descriptor), logged once per run of refusals.
pub fn capped<C>(
    accepted: impl Stream<Item = io::Result<C>>,
    caps: ConnectionCaps,
    endpoint: String,
) -> impl Stream<Item = io::Result<Capped<C>>> {
    let mut refusing = false;
    tokio_stream::StreamExt::filter_map(accepted, move |c| match c {
        Err(e) => Some(Err(e)),
        Ok(io) => match caps.admit() {
            Ok(place) => {
                if std::mem::take(&mut refusing) {
                    tracing::info!(%endpoint, "accepting connections under the cap again");
                }
                Some(Ok(Capped { io, _place: place }))
            }
            Err(why) => {
                if !std::mem::replace(&mut refusing, true) {
                    tracing::warn!(%endpoint, "closing new connections: {why}");
                }
                None
            }
        },
    })
}
