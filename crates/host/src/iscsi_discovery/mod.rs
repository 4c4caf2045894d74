//! An in-process iSCSI SendTargets discovery client (RFC 7143): a discovery session over TCP —
//! login (security stage with `AuthMethod=None` or one-way CHAP-MD5, then operational stage),
//! a Text request `SendTargets=All` (following continuations), and a logout.
//!
//! It needs no kernel initiator and no `iscsid`, so portals can be discovered on any host.
//! The whole session has one deadline (the limit given, or the caller's gRPC deadline when that
//! is sooner), checked before every read and write, so a portal that answers a byte at a time
//! is cut off as surely as a silent one; every answer has a size limit. The CHAP secret only
//! enters the MD5 response; no error or log line carries it.

use csi_proxy_core::{Error, Kind, Result};
use csi_proxy_formats::iscsi_pdu as pdu;
use pdu::{BHS_LEN, DiscoveredTarget, LoginRequest, Pdu, Stage, opcode};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What the data segment we announce may be, and the largest one we accept from a target.
const MAX_RECV_DATA: usize = 65_536;
/// The largest whole SendTargets answer (across continuations) accepted.
const MAX_TEXT_TOTAL: usize = 4 << 20;
/// How many login round trips a target may ask for before we give up.
const MAX_LOGIN_STEPS: usize = 8;

/// One-way CHAP credentials for a discovery session. `Debug` redacts the secret.
#[derive(Debug, Clone)]
pub struct DiscoveryChap {
    /// `CHAP_N`.
    pub username: String,
    /// The secret the target shares with us.
    pub secret: csi_proxy_core::iscsi::Secret,
}

/// Where and as whom to discover.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// Host name or address of the portal.
    pub address: String,
    /// Its TCP port.
    pub port: u16,
    /// This initiator's iSCSI name (`InitiatorName`).
    pub initiator_name: String,
    /// CHAP credentials, offered when the target asks for CHAP.
    pub chap: Option<DiscoveryChap>,
    /// Limit on the whole discovery session (connecting, logging in, the answer, logging out).
    pub timeout: Duration,
}

const OP: &str = "DiscoverTargetPortal";

struct Session<'a> {
    d: &'a Discovery,
    stream: TcpStream,
    itt: u32,
    cmd_sn: u32,
    exp_stat_sn: u32,
    /// The session's ISID: the same in every login request of the session.
    isid: [u8; 6],
    object: String,
    /// When the session must be over.
    deadline: Instant,
}

impl Discovery {
    /// Runs a discovery session and returns the targets the portal reports.
    ///
    /// Errors: UNAVAILABLE when the portal cannot be reached or breaks the protocol,
    /// DEADLINE_EXCEEDED on a timeout, PERMISSION_DENIED when the target rejects our
    /// credentials, FAILED_PRECONDITION when it requires CHAP and none was given.
    pub fn send_targets(&self) -> Result<Vec<DiscoveredTarget>> {
        let mut s = self.connect()?;
        s.login()?;
        let targets = s.text_send_targets()?;
        // The answer is what matters; a target that drops the connection on logout is fine.
        if let Err(e) = s.logout() {
            tracing::debug!(portal = %s.object, error = %e, "iSCSI discovery logout failed");
        }
        Ok(targets)
    }

    fn object(&self) -> String {
        if self.address.contains(':') {
            format!("portal [{}]:{}", self.address, self.port)
        } else {
            format!("portal {}:{}", self.address, self.port)
        }
    }

    fn connect(&self) -> Result<Session<'_>> {
        let object = self.object();
        let mut deadline = Instant::now() + self.timeout;
        if let Some(caller) = csi_proxy_core::deadline::current() {
            deadline = deadline.min(caller);
        }
        let addrs: Vec<_> = (self.address.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| {
                Error::new(
                    Kind::Unavailable,
                    OP,
                    &object,
                    format!("cannot resolve: {e}"),
                )
            })?
            .collect();
        let mut last = None;
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(a, left) {
                Ok(stream) => {
                    stream
                        .set_nodelay(true)
                        .map_err(|e| Error::io(OP, &object, &e))?;
                    return Ok(Session {
                        d: self,
                        stream,
                        itt: 1,
                        cmd_sn: 1,
                        exp_stat_sn: 0,
                        isid: isid(),
                        object,
                        deadline,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        let cause = match last {
            Some(e) => format!("cannot connect: {e}"),
            None => "the name resolves to no address".into(),
        };
        Err(Error::new(Kind::Unavailable, OP, &object, cause))
    }
}

impl Session<'_> {
    fn io_error(&self, what: &str, e: &std::io::Error) -> Error {
        let kind = match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Kind::DeadlineExceeded,
            _ => Kind::Unavailable,
        };
        Error::new(kind, OP, &self.object, format!("{what}: {e}"))
    }

    fn protocol(&self, why: impl std::fmt::Display) -> Error {
        Error::new(
            Kind::Unavailable,
            OP,
            &self.object,
            format!("iSCSI protocol error: {why}"),
        )
    }

    /// The time left before the session's deadline; DEADLINE_EXCEEDED once it has passed.
    fn left(&self, what: &str) -> Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                Kind::DeadlineExceeded,
                OP,
                &self.object,
                format!("{what}: the portal did not finish the discovery session in time"),
            ));
        }
        Ok(left)
    }

    fn send(&mut self, p: &Pdu) -> Result<()> {
        let bytes = p.encode();
        let left = self.left("sending")?;
        self.stream
            .set_write_timeout(Some(left))
            .and_then(|_| self.stream.write_all(&bytes))
            .map_err(|e| self.io_error("sending", &e))
    }

    /// Fills `buf`, each read limited to the time left, so the deadline holds however the
    /// portal spreads its bytes.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let left = self.left("receiving")?;
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| self.io_error("receiving", &e))?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(self.io_error(
                        "receiving",
                        &std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                    ));
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error("receiving", &e)),
            }
        }
        Ok(())
    }

    fn recv(&mut self) -> Result<Pdu> {
        let mut bhs = [0u8; BHS_LEN];
        self.read_full(&mut bhs)?;
        let (mut p, len) = Pdu::decode_header(bhs, MAX_RECV_DATA).map_err(|e| self.protocol(e))?;
        let mut data = vec![0u8; len + pdu::padding(len)];
        self.read_full(&mut data)?;
        data.truncate(len);
        p.data = data;
        if p.opcode() == opcode::REJECT {
            return Err(self.protocol(format!(
                "the target rejected a request (reason {:#04x})",
                p.bhs[2]
            )));
        }
        self.exp_stat_sn = p.stat_sn().wrapping_add(1);
        Ok(p)
    }

    fn login_step(
        &mut self,
        tsih: u16,
        transit: bool,
        current: Stage,
        next: Stage,
        text: &[(&str, &str)],
    ) -> Result<(Pdu, Vec<(String, String)>)> {
        let req = LoginRequest {
            transit,
            current,
            next,
            isid: self.isid,
            tsih,
            itt: self.itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            text: pdu::encode_text(text),
        };
        self.send(&req.to_pdu())?;
        let resp = self.recv()?;
        if resp.opcode() != opcode::LOGIN_RESP {
            return Err(self.protocol(format!(
                "expected a login response, got opcode {:#04x}",
                resp.opcode()
            )));
        }
        let (class, detail) = resp.login_status();
        if class != 0 {
            let kind = match (class, detail) {
                (2, 1) | (2, 2) => Kind::PermissionDenied,
                (2, 3) | (2, 4) => Kind::NotFound,
                (3, 2) | (3, 3) => Kind::Unavailable,
                _ => Kind::FailedPrecondition,
            };
            return Err(Error::new(
                kind,
                OP,
                &self.object,
                format!(
                    "login refused: {} (status {class:#04x}{detail:02x})",
                    pdu::login_status_text(class, detail)
                ),
            ));
        }
        let pairs = pdu::decode_text(&resp.data).map_err(|e| self.protocol(e))?;
        Ok((resp, pairs))
    }

    fn login(&mut self) -> Result<()> {
        let offered = if self.d.chap.is_some() {
            "CHAP,None"
        } else {
            "None"
        };
        let name = self.d.initiator_name.clone();
        let (mut resp, pairs) = self.login_step(
            0,
            true,
            Stage::Security,
            Stage::Operational,
            &[
                ("InitiatorName", &name),
                ("SessionType", "Discovery"),
                ("AuthMethod", offered),
            ],
        )?;
        let mut tsih = resp.tsih();
        match pdu::value(&pairs, "AuthMethod") {
            Some("CHAP") => {
                resp = self.chap(tsih)?;
                tsih = resp.tsih();
            }
            Some("None") | None => {}
            Some("Reject") | Some("NotUnderstood") | Some("Irrelevant")
                if self.d.chap.is_none() =>
            {
                return Err(Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &self.object,
                    "the target requires authentication for discovery and no CHAP credentials were given",
                ));
            }
            Some(other) => {
                return Err(self.protocol(format!("unsupported AuthMethod {other:?}")));
            }
        }
        // Security done (the target may have moved straight on); negotiate the operational
        // stage until the target lets us into full feature phase.
        let mut current = match (resp.is_final(), resp.next_stage()) {
            (true, Some(Stage::FullFeature)) => return Ok(()),
            (true, Some(Stage::Operational)) => Stage::Operational,
            _ => Stage::Security,
        };
        let max = MAX_RECV_DATA.to_string();
        for _ in 0..MAX_LOGIN_STEPS {
            let text: Vec<(&str, &str)> = if current == Stage::Operational {
                vec![
                    ("HeaderDigest", "None"),
                    ("DataDigest", "None"),
                    ("MaxRecvDataSegmentLength", &max),
                ]
            } else {
                Vec::new()
            };
            let next = if current == Stage::Operational {
                Stage::FullFeature
            } else {
                Stage::Operational
            };
            let (r, _) = self.login_step(tsih, true, current, next, &text)?;
            tsih = r.tsih();
            if r.is_final() {
                match r.next_stage() {
                    Some(Stage::FullFeature) => return Ok(()),
                    Some(Stage::Operational) => current = Stage::Operational,
                    _ => {}
                }
            }
        }
        Err(self.protocol("the login did not reach full feature phase"))
    }

    /// CHAP-MD5 exchange (RFC 7143 §12.1.3): offer algorithm 5, answer the challenge.
    fn chap(&mut self, tsih: u16) -> Result<Pdu> {
        let Some(chap) = self.d.chap.clone() else {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &self.object,
                "the target requires CHAP for discovery and no CHAP credentials were given",
            ));
        };
        let (_, pairs) = self.login_step(
            tsih,
            false,
            Stage::Security,
            Stage::Security,
            &[("CHAP_A", "5")],
        )?;
        if pdu::value(&pairs, "CHAP_A") != Some("5") {
            return Err(self.protocol("the target does not offer CHAP with MD5"));
        }
        let id: u8 = pdu::value(&pairs, "CHAP_I")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| self.protocol("missing or bad CHAP_I"))?;
        let challenge = pdu::value(&pairs, "CHAP_C")
            .ok_or_else(|| self.protocol("missing CHAP_C"))
            .and_then(|c| pdu::decode_binary(c).map_err(|e| self.protocol(e)))?;
        let response = pdu::encode_hex(&pdu::chap_response(
            id,
            chap.secret.expose().as_bytes(),
            &challenge,
        ));
        let (resp, _) = self.login_step(
            tsih,
            true,
            Stage::Security,
            Stage::Operational,
            &[("CHAP_N", &chap.username), ("CHAP_R", &response)],
        )?;
        Ok(resp)
    }

    fn text_send_targets(&mut self) -> Result<Vec<DiscoveredTarget>> {
        self.itt = self.itt.wrapping_add(1);
        let mut ttt = 0xffff_ffff;
        let mut text = b"SendTargets=All\0".to_vec();
        let mut answer = Vec::new();
        loop {
            let req = pdu::text_request(self.itt, ttt, self.cmd_sn, self.exp_stat_sn, &text);
            self.send(&req)?;
            let resp = self.recv()?;
            if resp.opcode() != opcode::TEXT_RESP {
                return Err(self.protocol(format!(
                    "expected a text response, got opcode {:#04x}",
                    resp.opcode()
                )));
            }
            self.cmd_sn = self.cmd_sn.wrapping_add(1);
            answer.extend_from_slice(&resp.data);
            if answer.len() > MAX_TEXT_TOTAL {
                return Err(self.protocol("the SendTargets answer is too large"));
            }
            // More follows while the target keeps the exchange open (C bit or a real TTT).
            if resp.is_final() && !resp.is_continued() {
                break;
            }
            ttt = resp.ttt();
            text.clear();
        }
        let pairs = pdu::decode_text(&answer).map_err(|e| self.protocol(e))?;
        Ok(pdu::send_targets(&pairs))
    }

    fn logout(&mut self) -> Result<()> {
        self.itt = self.itt.wrapping_add(1);
        let req = pdu::logout_request(self.itt, self.cmd_sn, self.exp_stat_sn);
        self.send(&req)?;
        let resp = self.recv()?;
        if resp.opcode() != opcode::LOGOUT_RESP || resp.logout_response() != 0 {
            return Err(self.protocol("logout not confirmed"));
        }
        Ok(())
    }
}

/// A random-type ISID (RFC 7143 §11.12.5: T=01), varied by process and time so concurrent
/// discovery sessions from this host do not collide.
fn isid() -> [u8; 6] {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let p = std::process::id();
    let x = t ^ p.rotate_left(16);
    let b = x.to_be_bytes();
    [0x40, 0x00, b[0], b[1], b[2], b[3]]
}
