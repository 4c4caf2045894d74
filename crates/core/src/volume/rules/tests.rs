//! The rules against a fake volume: every state a host can report, no root, no disk.

use super::*;
use std::cell::RefCell;

/// A volume as a host would report it, recording what the rules made the host do.
#[derive(Default)]
struct Fake {
    mounted_at: Option<String>,
    content: RefCell<Option<Content>>,
    record: RefCell<Option<FormatRecord>>,
    /// The identity this host chooses in advance (Linux), or none (Windows).
    chosen: Option<String>,
    /// What the filesystem the host makes is named after it is made.
    makes: Option<Content>,
    made: RefCell<Vec<(Option<String>, bool)>>,
    records: RefCell<Vec<FormatRecord>>,
    occupant: Option<Occupant>,
    exists: bool,
    empty: Option<bool>,
    mounted: RefCell<bool>,
}

fn content(kind: &str, id: Option<&str>) -> Content {
    Content {
        kind: kind.into(),
        id: id.map(str::to_string),
        shown: kind.into(),
    }
}

fn record(fs: &str, id: &str, done: bool) -> FormatRecord {
    FormatRecord {
        fs: fs.into(),
        id: id.into(),
        done,
    }
}

impl FormatTarget for Fake {
    fn object(&self) -> String {
        "volume \"v\"".into()
    }
    fn mounted_at(&self) -> Result<Option<String>> {
        Ok(self.mounted_at.clone())
    }
    fn content(&self) -> Result<Option<Content>> {
        Ok(self.content.borrow().clone())
    }
    fn record(&self) -> Option<FormatRecord> {
        self.record.borrow().clone()
    }
    fn write_record(&self, r: &FormatRecord) -> Result<()> {
        self.records.borrow_mut().push(r.clone());
        *self.record.borrow_mut() = Some(r.clone());
        Ok(())
    }
    fn new_filesystem(&self) -> Result<(String, Option<String>)> {
        Ok(("ext4".into(), self.chosen.clone()))
    }
    fn make_filesystem(&self, id: Option<&str>, finishing: bool) -> Result<()> {
        self.made
            .borrow_mut()
            .push((id.map(str::to_string), finishing));
        *self.content.borrow_mut() = self.makes.clone();
        Ok(())
    }
}

impl MountTarget for Fake {
    fn object(&self) -> String {
        "volume \"v\" at \"/t\"".into()
    }
    fn target_exists(&self) -> Result<bool> {
        Ok(self.exists)
    }
    fn occupant(&self) -> Result<Occupant> {
        Ok(self.occupant.clone().unwrap_or(Occupant::Nothing))
    }
    fn target_empty(&self) -> Result<Option<bool>> {
        Ok(self.empty)
    }
    fn content(&self) -> Result<Option<Content>> {
        Ok(self.content.borrow().clone())
    }
    fn record(&self) -> Option<FormatRecord> {
        self.record.borrow().clone()
    }
    fn mount(&self) -> Result<()> {
        *self.mounted.borrow_mut() = true;
        Ok(())
    }
}

fn blank(chosen: Option<&str>, makes: Content) -> Fake {
    Fake {
        chosen: chosen.map(str::to_string),
        makes: Some(makes),
        ..Fake::default()
    }
}

#[test]
fn a_blank_volume_is_formatted_with_the_intent_recorded_first() {
    let f = blank(Some("u1"), content("ext4", Some("u1")));
    format("FormatVolume", &f).unwrap();
    assert_eq!(*f.made.borrow(), [(Some("u1".to_string()), false)]);
    assert_eq!(
        *f.records.borrow(),
        [record("ext4", "u1", false), record("ext4", "u1", true)]
    );
    // A retry (the answer was lost): nothing is made again.
    format("FormatVolume", &f).unwrap();
    assert_eq!(f.made.borrow().len(), 1);
}

#[test]
fn an_identity_chosen_by_the_os_is_recorded_once_known() {
    // Windows: the serial number exists only after the format.
    let f = blank(None, content("NTFS", Some("1A2B3C4D")));
    format("FormatVolume", &f).unwrap();
    assert_eq!(
        *f.records.borrow(),
        [record("ext4", "", false), record("ext4", "1A2B3C4D", true)]
    );
}

#[test]
fn anything_not_ours_is_never_formatted_over() {
    for (found, rec) in [
        (content("xfs", Some("other")), None),
        (content("crypto_LUKS", None), None),
        (
            content("ext4", Some("u2")),
            Some(record("ext4", "u1", true)),
        ),
        (
            content("ext4", Some("u2")),
            Some(record("ext4", "u1", false)),
        ),
        (content("xfs", None), Some(record("NTFS", "", false))),
    ] {
        let f = blank(Some("u9"), content("ext4", Some("u9")));
        *f.content.borrow_mut() = Some(found.clone());
        *f.record.borrow_mut() = rec;
        let e = format("FormatVolume", &f).unwrap_err();
        assert_eq!(e.kind(), Kind::FailedPrecondition);
        assert!(
            e.message().ends_with(&format!(
                "already holds {}; refusing to format over it",
                found.kind
            )),
            "{}",
            e.message()
        );
        assert!(f.made.borrow().is_empty() && f.records.borrow().is_empty());
    }
}

#[test]
fn an_interrupted_format_of_ours_is_finished_with_its_identity() {
    // Cut off after the intent: nothing visible yet, or our partial filesystem.
    for found in [None, Some(content("ext4", Some("u1")))] {
        let f = blank(Some("fresh"), content("ext4", Some("u1")));
        *f.content.borrow_mut() = found;
        *f.record.borrow_mut() = Some(record("ext4", "u1", false));
        format("FormatVolume", &f).unwrap();
        assert_eq!(*f.made.borrow(), [(Some("u1".to_string()), true)]);
        assert_eq!(f.records.borrow().last(), Some(&record("ext4", "u1", true)));
    }
    // Windows: the pending record has no identity; a partial NTFS is ours to finish.
    let f = blank(None, content("NTFS", Some("55")));
    *f.content.borrow_mut() = Some(content("NTFS", None));
    *f.record.borrow_mut() = Some(record("NTFS", "", false));
    format("FormatVolume", &f).unwrap();
    assert_eq!(*f.made.borrow(), [(None, true)]);
}

#[test]
fn a_mounted_volume_is_never_formatted() {
    let f = Fake {
        mounted_at: Some("/somewhere".into()),
        ..blank(Some("u"), content("ext4", Some("u")))
    };
    let e = format("FormatVolume", &f).unwrap_err();
    assert!(
        e.message().contains("mounted at \"/somewhere\""),
        "{}",
        e.message()
    );
    assert!(f.made.borrow().is_empty());
}

#[test]
fn a_format_that_leaves_nothing_is_an_internal_error() {
    let f = Fake {
        makes: None,
        ..blank(Some("u"), content("ext4", Some("u")))
    };
    assert_eq!(
        format("FormatVolume", &f).unwrap_err().kind(),
        Kind::Internal
    );
    assert_eq!(f.records.borrow().len(), 1, "left pending for the retry");
}

fn mountable() -> Fake {
    Fake {
        exists: true,
        empty: Some(true),
        content: RefCell::new(Some(content("ext4", Some("u1")))),
        record: RefCell::new(Some(record("ext4", "u1", true))),
        ..Fake::default()
    }
}

#[test]
fn mount_rules() {
    let ok = mountable();
    mount("MountVolume", &ok).unwrap();
    assert!(*ok.mounted.borrow());

    let again = Fake {
        occupant: Some(Occupant::ThisVolume),
        ..mountable()
    };
    mount("MountVolume", &again).unwrap();
    assert!(!*again.mounted.borrow(), "already there: nothing done");

    let refusals: [(Fake, &str); 5] = [
        (
            Fake {
                exists: false,
                ..mountable()
            },
            "does not exist",
        ),
        (
            Fake {
                occupant: Some(Occupant::Other("xfs /dev/sdz".into())),
                ..mountable()
            },
            "another filesystem (xfs /dev/sdz) is mounted there",
        ),
        (
            Fake {
                empty: Some(false),
                ..mountable()
            },
            "not empty",
        ),
        (
            Fake {
                content: RefCell::new(None),
                ..mountable()
            },
            "FormatVolume first",
        ),
        (
            Fake {
                record: RefCell::new(Some(record("ext4", "u1", false))),
                ..mountable()
            },
            "was interrupted",
        ),
    ];
    for (f, why) in refusals {
        let e = mount("MountVolume", &f).unwrap_err();
        assert_eq!(e.kind(), Kind::FailedPrecondition);
        assert!(e.message().contains(why), "{}", e.message());
        assert!(!*f.mounted.borrow());
    }
    // A target only the mount can check for emptiness is left to it.
    let unknown = Fake {
        empty: None,
        ..mountable()
    };
    mount("MountVolume", &unknown).unwrap();
}

#[test]
fn unmount_only_ever_takes_the_volume_away() {
    assert_eq!(unmount_decision("U", "o", &Occupant::Nothing), Ok(false));
    assert_eq!(unmount_decision("U", "o", &Occupant::ThisVolume), Ok(true));
    let e = unmount_decision("U", "o", &Occupant::Other("tmpfs".into())).unwrap_err();
    assert!(
        e.message().contains("a different filesystem (tmpfs)"),
        "{}",
        e.message()
    );
}

#[test]
fn resize_rules() {
    const M: u64 = 1 << 20;
    let steps = |current, maximum, fs_bytes, target| {
        let facts = ResizeFacts {
            current,
            maximum,
            fs_bytes,
            sector: 512,
            slack: M,
            refusal: None,
        };
        resize_steps("ResizeVolume", "v", facts, target)
    };
    // A partition this host cannot grow: nothing to grow is decided first and succeeds; a
    // growth is refused with the reason.
    let cannot = |current, maximum, target| {
        let facts = ResizeFacts {
            current,
            maximum,
            fs_bytes: Some(current),
            sector: 512,
            slack: M,
            refusal: Some("it is a logical partition".into()),
        };
        resize_steps("ResizeVolume", "v", facts, target)
    };
    for target in [ResizeTarget::Maximum, ResizeTarget::Bytes(100 * M)] {
        assert_eq!(
            cannot(100 * M, 150 * M, target),
            Ok(ResizeSteps {
                grow_partition: 0,
                extend_filesystem: false
            })
        );
    }
    let e = cannot(100 * M, 1000 * M, ResizeTarget::Maximum).unwrap_err();
    assert_eq!(e.kind(), Kind::FailedPrecondition);
    assert!(e.message().contains("logical partition"), "{}", e.message());
    // Maximum, with a filesystem: grow both.
    assert_eq!(
        steps(100 * M, 1000 * M, Some(100 * M), ResizeTarget::Maximum),
        Ok(ResizeSteps {
            grow_partition: 900 * M,
            extend_filesystem: true
        })
    );
    // Within 100 MiB, or a shrink: nothing.
    for target in [ResizeTarget::Bytes(150 * M), ResizeTarget::Bytes(10 * M)] {
        assert_eq!(
            steps(100 * M, 1000 * M, Some(100 * M), target),
            Ok(ResizeSteps {
                grow_partition: 0,
                extend_filesystem: false
            })
        );
    }
    // A partition grown by a cut-off call: only the filesystem follows.
    assert_eq!(
        steps(1000 * M, 1000 * M, Some(100 * M), ResizeTarget::Maximum),
        Ok(ResizeSteps {
            grow_partition: 0,
            extend_filesystem: true
        })
    );
    // No filesystem: the partition alone.
    assert!(
        !steps(100 * M, 1000 * M, None, ResizeTarget::Maximum)
            .unwrap()
            .extend_filesystem
    );
    // Above the maximum: refused, naming both.
    let e = steps(
        100 * M,
        1000 * M,
        Some(100 * M),
        ResizeTarget::Bytes(2000 * M),
    )
    .unwrap_err();
    assert_eq!(e.kind(), Kind::InvalidArgument);
    assert!(
        e.message().contains(&format!("{}", 1000 * M)),
        "{}",
        e.message()
    );
}

#[test]
fn is_formatted_answers_false_only_for_nothing_and_our_own_unfinished_format() {
    let ours = |done: bool| FormatRecord {
        fs: "ext4".into(),
        id: "u1".into(),
        done,
    };
    let fs = content("ext4", Some("u1"));
    assert!(!is_formatted(None, None));
    assert!(!is_formatted(None, Some(&ours(false))));
    assert!(is_formatted(Some(&fs), None), "someone's filesystem");
    assert!(
        is_formatted(Some(&fs), Some(&ours(true))),
        "our finished one"
    );
    assert!(
        !is_formatted(Some(&fs), Some(&ours(false))),
        "our interrupted one: FormatVolume finishes it"
    );
    let other = content("ext4", Some("u2"));
    assert!(
        is_formatted(Some(&other), Some(&ours(false))),
        "another filesystem than the one we were making"
    );
}
