//! Bytes from the network and from the host's own tables that a tenant can shape: an iSCSI
//! portal's answers during SendTargets discovery (header, text keys, CHAP binary values), a
//! reparse buffer read from a tenant's link, and `/proc/self/mountinfo` lines (a tenant's mount
//! points show up there). The first byte picks the parser; the rest is its input.
//! - nothing panics;
//! - a PDU header never yields a data segment longer than the limit it was given;
//! - decoded text keys hold no `=` and no NUL, hex CHAP values decode to half their digits;
//! - a reparse point's direct target, when there is one, is non-empty.

use csi_proxy_formats::iscsi_pdu as pdu;

/// The data segment limit the discovery client passes (any value works for the property).
const MAX_DATA: usize = 64 << 10;

/// One input; see the module doc.
pub fn run(data: &[u8]) {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    match pick % 4 {
        0 => {
            let mut bhs = [0u8; pdu::BHS_LEN];
            let n = input.len().min(pdu::BHS_LEN);
            bhs[..n].copy_from_slice(&input[..n]);
            if let Ok((_, len)) = pdu::Pdu::decode_header(bhs, MAX_DATA) {
                assert!(len <= MAX_DATA, "{len}");
            }
        }
        1 => {
            if let Ok(pairs) = pdu::decode_text(input) {
                for (k, v) in &pairs {
                    assert!(
                        !k.contains('=') && !k.contains('\0') && !v.contains('\0'),
                        "{k:?}={v:?}"
                    );
                }
                let _ = pdu::send_targets(&pairs);
                for (_, v) in &pairs {
                    if let Ok(bytes) = pdu::decode_binary(v)
                        && let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X"))
                    {
                        assert_eq!(bytes.len() * 2, hex.len(), "{v:?}");
                    }
                }
            }
        }
        2 => {
            if let Ok(point) = csi_proxy_formats::reparse::parse(input) {
                let _ = point.tag();
                let _ = point.is_volume_mount_point();
                if let Some(dest) = point.destination()
                    && let Some(t) =
                        csi_proxy_formats::reparse::direct_target(r"C:\var\lib\kubelet\x", &dest)
                {
                    assert!(!t.is_empty());
                }
            }
        }
        _ => {
            let _ = csi_proxy_formats::mountinfo::parse(input);
            let _ = csi_proxy_formats::mountinfo::unescape(input);
        }
    }
}
