//! A connection to a message bus: its address, authentication, and calls.

#[cfg(test)]
use super::NO_REPLY_EXPECTED;
use super::{Error, Message, MessageType, Result, Value, protocol};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where a bus listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusAddress {
    /// `unix:path=…`
    Path(PathBuf),
    /// `unix:abstract=…` (Linux abstract socket namespace)
    Abstract(Vec<u8>),
}

/// Parses the first entry of a `;`-separated D-Bus address list ("Server Addresses": keys and
/// values separated by `,` and `=`, values `%`-escaped); only the `unix` transport with `path`
/// or `abstract` is supported.
pub fn parse_address(address: &str) -> Result<BusAddress> {
    let first = address.split(';').next().unwrap_or_default().trim();
    let Some((transport, rest)) = first.split_once(':') else {
        return protocol(format!("address {first:?} has no transport"));
    };
    if transport != "unix" {
        return protocol(format!(
            "transport {transport:?} is not supported (only unix)"
        ));
    }
    for kv in rest.split(',') {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        let v = unescape(v)?;
        match k {
            "path" => {
                use std::os::unix::ffi::OsStringExt;
                return Ok(BusAddress::Path(std::ffi::OsString::from_vec(v).into()));
            }
            "abstract" => return Ok(BusAddress::Abstract(v)),
            _ => {}
        }
    }
    protocol(format!(
        "address {first:?} names no path= or abstract= socket"
    ))
}

fn unescape(v: &str) -> Result<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            let Some(n) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
                return protocol(format!("bad %-escape in address value {v:?}"));
            };
            out.push(n);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// An authenticated connection to a message bus.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
    /// Bytes read but not yet consumed.
    rbuf: Vec<u8>,
    next_serial: u32,
    unique_name: String,
    timeout: Duration,
}

impl Connection {
    /// Connects to `address`, authenticates and says Hello, each step within `timeout`.
    pub fn connect(address: &str, timeout: Duration) -> Result<Connection> {
        let stream = match parse_address(address)? {
            BusAddress::Path(p) => UnixStream::connect(p)?,
            BusAddress::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                UnixStream::connect_addr(&a)?
            }
        };
        stream.set_write_timeout(Some(timeout))?;
        let mut c = Connection {
            stream,
            rbuf: Vec::new(),
            next_serial: 1,
            unique_name: String::new(),
            timeout,
        };
        c.authenticate()?;
        // "Before an application is able to send messages to other applications it must send
        // the org.freedesktop.DBus.Hello message" ("Message Bus Specification").
        let reply = c.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Hello",
            &[],
        )?;
        c.unique_name = match reply.first().and_then(Value::as_str) {
            Some(n) => n.to_string(),
            None => return protocol("Hello returned no name"),
        };
        Ok(c)
    }

    /// SASL EXTERNAL ("Authentication Protocol"): a NUL byte, `AUTH EXTERNAL` with the
    /// hex-encoded ASCII decimal uid, `OK <guid>` back, then `BEGIN`.
    fn authenticate(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let uid = rustix::process::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.stream
            .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let line = self.read_line(deadline)?;
        if !line.starts_with("OK ") {
            return protocol(format!("authentication refused: {line:?}"));
        }
        self.stream.write_all(b"BEGIN\r\n")?;
        Ok(())
    }

    fn read_line(&mut self, deadline: Instant) -> Result<String> {
        loop {
            if let Some(i) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.rbuf[..i]).into_owned();
                self.rbuf.drain(..i + 2);
                return Ok(line);
            }
            if self.rbuf.len() > 16 * 1024 {
                return protocol("authentication line too long");
            }
            self.fill(deadline)?;
        }
    }

    /// Reads more bytes into the buffer, failing with `TimedOut` at `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        let timed_out = || {
            Error::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer from the bus in time",
            ))
        };
        if left.is_zero() {
            return Err(timed_out());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(Error::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the bus closed the connection",
            ))),
            Ok(n) => {
                self.rbuf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(timed_out())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn read_message(&mut self, deadline: Instant) -> Result<Message> {
        while self.rbuf.len() < 16 {
            self.fill(deadline)?;
        }
        let start: &[u8; 16] = self.rbuf.first_chunk().expect("16 bytes");
        let len = Message::frame_len(start)?;
        while self.rbuf.len() < len {
            self.fill(deadline)?;
        }
        let m = Message::decode(&self.rbuf[..len]).map_err(Error::from);
        self.rbuf.drain(..len);
        m
    }

    #[cfg(test)]
    /// The next message from the bus, waiting at most `timeout`.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Message> {
        self.read_message(Instant::now() + timeout)
    }

    /// Sends `msg` with the next serial, which it returns.
    pub fn send(&mut self, mut msg: Message) -> Result<u32> {
        msg.serial = self.next_serial;
        // "The serial ... must not be zero."
        self.next_serial = self.next_serial.checked_add(1).unwrap_or(1);
        self.stream.write_all(&msg.encode()?)?;
        Ok(msg.serial)
    }

    /// Calls a method and waits (within the connection's timeout) for its reply, skipping
    /// signals and other messages; an error reply becomes [`Error::Remote`].
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Value],
    ) -> Result<Vec<Value>> {
        let deadline = Instant::now() + self.timeout;
        let serial = self.send(Message::method_call(
            destination,
            path,
            interface,
            member,
            args,
        )?)?;
        loop {
            let m = self.read_message(deadline)?;
            if m.reply_serial != Some(serial) {
                continue;
            }
            match m.kind {
                MessageType::MethodReturn => return Ok(m.args()?),
                MessageType::Error => {
                    let text = m
                        .args()
                        .ok()
                        .and_then(|a| a.first().and_then(|v| v.as_str().map(str::to_string)));
                    return Err(Error::Remote {
                        name: m.error_name.unwrap_or_default(),
                        message: text.unwrap_or_default(),
                    });
                }
                _ => continue,
            }
        }
    }

    #[cfg(test)]
    /// Asks the bus for `name` (RequestName with DBUS_NAME_FLAG_DO_NOT_QUEUE) and fails unless
    /// this connection becomes (or already is) its primary owner.
    pub fn request_name(&mut self, name: &str) -> Result<()> {
        let reply = self.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "RequestName",
            &[Value::Str(name.into()), Value::U32(4)],
        )?;
        // 1 = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER, 4 = ALREADY_OWNER.
        match reply.first().and_then(Value::as_u32) {
            Some(1 | 4) => Ok(()),
            other => protocol(format!("RequestName {name:?} answered {other:?}")),
        }
    }

    #[cfg(test)]
    fn reply_to(&mut self, to: &Message, mut m: Message) -> Result<()> {
        if to.flags & NO_REPLY_EXPECTED != 0 {
            return Ok(());
        }
        m.reply_serial = Some(to.serial);
        m.destination = to.sender.clone();
        self.send(m).map(|_| ())
    }

    #[cfg(test)]
    /// Answers method call `to` with `args`.
    pub fn reply(&mut self, to: &Message, args: &[Value]) -> Result<()> {
        let mut m = Message::new(MessageType::MethodReturn);
        m.set_args(args)?;
        self.reply_to(to, m)
    }

    #[cfg(test)]
    /// Answers method call `to` with error `name` and `text`.
    pub fn reply_error(&mut self, to: &Message, name: &str, text: &str) -> Result<()> {
        let mut m = Message::new(MessageType::Error);
        m.error_name = Some(name.into());
        m.set_args(&[Value::Str(text.into())])?;
        self.reply_to(to, m)
    }
}
