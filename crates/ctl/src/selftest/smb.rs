//! The optional SMB step (`--smb-server`): how a failed `MSFT_SmbGlobalMapping.Create` reaches
//! the daemon on this build (ledger row 38), shown by mapping a share that does not exist.
//!
//! Safe by construction: the share's name is the selftest's own (`csi-proxy-selftest-<pid>`),
//! so no mapping of the node has its root and the daemon has none to reuse or replace; no
//! credentials are sent (the node's own identity), so no account can be locked out and no
//! session with other credentials is touched. Should the server have such a share after all,
//! the mapping made is removed at once.

use super::status;
use csi_proxy_client::Connector;
use csi_proxy_client::smb::SmbClient;
use std::time::Instant;

/// The step's recorded name.
pub const STEP: &str = "SMB: NewSmbGlobalMapping of a missing share";

/// Runs the step against `server`, or lists it as not run.
pub(super) async fn run(out: &mut super::Outcome, connector: &Connector, server: Option<&str>) {
    let Some(server) = server else {
        out.not_run(STEP, "not run: needs --smb-server");
        return;
    };
    let root = format!(
        r"\\{}\csi-proxy-selftest-{}",
        server.trim_start_matches('\\'),
        std::process::id()
    );
    let t = Instant::now();
    let mut client = match SmbClient::connect(connector).await {
        Ok(c) => c,
        Err(e) => {
            let _ = out.record::<()>(
                STEP,
                t,
                Err(format!("the daemon's SMB API is not reachable: {e}")),
            );
            return;
        }
    };
    match client.new_mapping(&root, "", "").await {
        Err(s) => {
            let answer = format!(
                "{} ({}; settles ledger row 38)",
                status("NewSmbGlobalMapping", &s),
                encoding(s.message())
            );
            let _ = out.record(STEP, t, Ok(((), answer)));
        }
        Ok(()) => {
            let _ = out.record(
                STEP,
                t,
                Ok((
                    (),
                    format!("{root} was mapped: the server has a share of that name"),
                )),
            );
            let t = Instant::now();
            let r = client
                .remove_mapping(&root)
                .await
                .map(|()| ((), format!("{root} removed")))
                .map_err(|s| status("RemoveSmbGlobalMapping", &s));
            let _ = out.record("clean-up: SMB RemoveSmbGlobalMapping", t, r);
        }
    }
}

/// How the Win32 code reached the daemon, from the `[0x…]` its SMB messages end with: an
/// `HRESULT_FROM_WIN32` (`0x8007xxxx`) is the call failing with it; a bare code came as the
/// method's `ReturnValue` or in the provider's extended error object.
fn encoding(message: &str) -> String {
    let code = message
        .rsplit_once("[0x")
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(hex, _)| u32::from_str_radix(hex, 16).ok());
    match code {
        Some(c) if c & 0xFFFF_0000 == 0x8007_0000 => format!(
            "Windows answered HRESULT_FROM_WIN32({}): the call itself failed",
            c & 0xFFFF
        ),
        Some(c) => format!(
            "Windows answered the bare code {c}: the method's ReturnValue or the provider's \
             extended error object"
        ),
        None => "no Win32 code in the answer".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_encoding_is_read_from_the_bracketed_code() {
        let e = super::encoding;
        assert!(
            e("NewSmbGlobalMapping x: the share was not found (error 67) [0x80070043]")
                .contains("HRESULT_FROM_WIN32(67)")
        );
        assert!(e("... (error 67) [0x43]").contains("bare code 67"));
        assert_eq!(e("failed"), "no Win32 code in the answer");
    }
}
