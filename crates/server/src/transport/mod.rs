//! Transports: Unix sockets (Linux) and named pipes (Windows), both wrapped in the
//! `:authority` fix that lets upstream Go clients through.

/// Implements `AsyncWrite` (every write goes straight to the `io` field) and tonic's
/// `Connected` (the inner connection's info) for a wrapper `$ty<IO>` that only changes what is
/// read, so each read-side wrapper states just its read logic.
macro_rules! write_through_wrapper {
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

pub mod accept;
pub mod ack_hold;
pub mod authority;
pub mod capped;
pub mod handshake_timeout;
#[cfg(windows)]
pub mod pipe;
#[cfg(unix)]
pub mod unix;
