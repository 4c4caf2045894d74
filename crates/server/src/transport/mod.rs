//! Transports: Unix sockets (Linux) and named pipes (Windows), both wrapped in the
//! `:authority` fix that lets upstream Go clients through.

/// `AsyncWrite` for a wrapper `$ty<IO>` whose every write goes straight to its `io` field.
macro_rules! write_through {
    ($ty:ident) => {
        impl<IO: ::tokio::io::AsyncWrite + Unpin> ::tokio::io::AsyncWrite for $ty<IO> {
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
            }

            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
            }

            fn poll_shutdown(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
            }

            fn poll_write_vectored(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }
        }
    };
}

/// `AsyncRead` for a wrapper `$ty<IO>` whose every read comes straight from its `io` field.
macro_rules! read_through {
    ($ty:ident) => {
        impl<IO: ::tokio::io::AsyncRead + Unpin> ::tokio::io::AsyncRead for $ty<IO> {
            fn poll_read(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &mut ::tokio::io::ReadBuf<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
            }
        }
    };
}

/// tonic's `Connected` for a wrapper `$ty<IO>`: the inner connection's info.
macro_rules! connected_through {
    ($ty:ident) => {
        impl<IO: ::tonic::transport::server::Connected> ::tonic::transport::server::Connected
            for $ty<IO>
        {
            type ConnectInfo = IO::ConnectInfo;

            fn connect_info(&self) -> Self::ConnectInfo {
                self.io.connect_info()
            }
        }
    };
}

/// Implements `AsyncWrite` (every write goes straight to the `io` field) and tonic's
/// `Connected` (the inner connection's info) for a wrapper `$ty<IO>` that only changes what is
/// read, so each read-side wrapper states just its read logic.
macro_rules! write_through_wrapper {
    ($ty:ident) => {
        write_through!($ty);
        connected_through!($ty);
    };
}

/// The same for a wrapper that only changes what is written: `AsyncRead` and `Connected`.
macro_rules! read_through_wrapper {
    ($ty:ident) => {
        read_through!($ty);
        connected_through!($ty);
    };
}

pub mod accept;
pub mod ack_hold;
#[cfg(unix)]
pub mod activation;
pub mod authority;
pub mod capped;
pub mod handshake_timeout;
pub mod names;
#[cfg(windows)]
pub mod pipe;
#[cfg(unix)]
pub mod unix;
