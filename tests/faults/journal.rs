//! The power cut's undo journal, as `powercut.c` writes it, and the
//! rollback that turns a SIGKILLed sidecar's files into what a power loss
//! could have left on disk: per file, every change after its last fsync is
//! undone, newest first (old bytes put back, size restored); a file created
//! after its directory's last fsync is deleted; then, with tearing on, a
//! random subset of the undone writes is put back, each whole or as a random
//! subset of its 512-byte sectors, as a disk may have persisted any of them.
//! The journal is emptied afterwards; the restarted sidecar appends anew.

use std::collections::{BTreeMap, HashSet};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use stepwell_test_support::rng::Rng;

/// The sector a disk writes whole or not at all.
pub const SECTOR: u64 = 512;

/// One journalled change of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A write: where, the size before, the bytes it replaced (short past
    /// the old end), and the bytes it wrote.
    Write { offset: u64, size_before: u64, old: Vec<u8>, new: Vec<u8> },
    /// A truncate (or extension) from `size_before` to `size`, and the bytes cut.
    Truncate { size_before: u64, size: u64, cut: Vec<u8> },
    /// fsync or fdatasync of the file.
    Sync,
    /// The file was created.
    Created,
    /// fsync of a directory (the record's path is the directory's).
    DirSync,
}

/// A journal record: a path and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub path: PathBuf,
    pub entry: Entry,
}

/// What one rollback did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rolled {
    /// Records undone.
    pub undone: usize,
    /// Files deleted because their creation never became durable.
    pub deleted: usize,
    /// Undone writes put back, whole or in part, by tearing.
    pub reapplied: usize,
}

/// A cursor over the journal's bytes; `None` at a record cut short.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head.to_vec())
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }

    fn record(&mut self) -> Option<Record> {
        let tag = self.take(1)?[0];
        let len = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        let path = PathBuf::from(String::from_utf8(self.take(len)?).ok()?);
        let entry = match tag {
            b'W' => {
                let (offset, size_before, old) = (self.u64()?, self.u64()?, self.bytes()?);
                Entry::Write { offset, size_before, old, new: self.bytes()? }
            }
            b'T' => Entry::Truncate { size_before: self.u64()?, size: self.u64()?, cut: self.bytes()? },
            b'S' => Entry::Sync,
            b'C' => Entry::Created,
            b'D' => Entry::DirSync,
            other => panic!("powercut journal: unknown record tag {other}"),
        };
        Some(Record { path, entry })
    }
}

/// The journal's records. A last record cut short (the SIGKILL landed in
/// the journal's own write, so the change it announced was never made) is
/// dropped.
pub fn parse(bytes: &[u8]) -> Vec<Record> {
    let mut cursor = Cursor(bytes);
    std::iter::from_fn(|| cursor.record()).collect()
}

/// The files whose creation is not durable: a Created with no DirSync of
/// their directory after it.
fn undurable_creations(records: &[Record]) -> HashSet<PathBuf> {
    let mut pending = HashSet::new();
    for record in records {
        match record.entry {
            Entry::Created => {
                pending.insert(record.path.clone());
            }
            Entry::DirSync => pending.retain(|file: &PathBuf| file.parent() != Some(record.path.as_path())),
            _ => {}
        }
    }
    pending
}

/// Per file, the changes since its last Sync or its last (re)creation,
/// oldest first. Those before a sync are durable; those before a creation
/// belong to an earlier file of that name, since unlinked.
fn unsynced(records: &[Record]) -> BTreeMap<PathBuf, Vec<Entry>> {
    let mut files: BTreeMap<PathBuf, Vec<Entry>> = BTreeMap::new();
    for record in records {
        let changes = files.entry(record.path.clone()).or_default();
        match &record.entry {
            Entry::Sync | Entry::Created => changes.clear(),
            Entry::DirSync => {}
            entry => changes.push(entry.clone()),
        }
    }
    files.retain(|_, changes| !changes.is_empty());
    files
}

/// Puts one change back: the file as it was before it.
fn undo(file: &std::fs::File, entry: &Entry) -> std::io::Result<()> {
    match entry {
        Entry::Write { offset, size_before, old, new } => {
            file.write_all_at(old, *offset)?;
            if offset + new.len() as u64 > *size_before {
                file.set_len(*size_before)?;
            }
        }
        Entry::Truncate { size_before, size, cut } => {
            file.set_len(*size_before)?;
            file.write_all_at(cut, *size)?;
        }
        _ => {}
    }
    Ok(())
}

/// Writes back what a disk may have persisted of one undone write: the
/// whole of it, or a random subset of its sectors.
fn tear(file: &std::fs::File, offset: u64, new: &[u8], rng: &mut Rng) -> std::io::Result<()> {
    if rng.chance(50) {
        return file.write_all_at(new, offset);
    }
    let end = offset + new.len() as u64;
    let mut sector = offset / SECTOR * SECTOR;
    while sector < end {
        let (from, to) = (sector.max(offset), (sector + SECTOR).min(end));
        if rng.chance(50) {
            file.write_all_at(&new[(from - offset) as usize..(to - offset) as usize], from)?;
        }
        sector += SECTOR;
    }
    Ok(())
}

/// Rolls the files back as a power cut would leave them (see the module's
/// header); with `tearing`, puts a random subset of the undone writes back,
/// in their original order (a page cache holds only a sector's latest
/// bytes, so an older write never lands over a newer one).
pub fn roll_back(records: &[Record], tearing: Option<&mut Rng>) -> std::io::Result<Rolled> {
    let mut rolled = Rolled::default();
    let doomed = undurable_creations(records);
    for path in &doomed {
        match std::fs::remove_file(path) {
            Ok(()) => rolled.deleted += 1,
            // Unlinked before the cut: unlink is not modelled.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    let files = unsynced(records);
    for (path, changes) in &files {
        if doomed.contains(path) {
            continue;
        }
        let file = match OpenOptions::new().write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        for entry in changes.iter().rev() {
            undo(&file, entry)?;
            rolled.undone += 1;
        }
    }
    if let Some(rng) = tearing {
        rolled.reapplied = reapply(&files, &doomed, rng)?;
    }
    Ok(rolled)
}

/// Tears: each undone write of a surviving file is put back, whole or in
/// part, or not, at random, in the file's journal order. Returns how many were.
fn reapply(files: &BTreeMap<PathBuf, Vec<Entry>>, doomed: &HashSet<PathBuf>, rng: &mut Rng) -> std::io::Result<usize> {
    let mut reapplied = 0;
    for (path, changes) in files {
        if doomed.contains(path) {
            continue;
        }
        let Ok(file) = OpenOptions::new().write(true).open(path) else { continue };
        for entry in changes {
            if let Entry::Write { offset, new, .. } = entry
                && rng.chance(50)
            {
                tear(&file, *offset, new, rng)?;
                reapplied += 1;
            }
        }
    }
    Ok(reapplied)
}

/// Reads the journal at `path`, rolls back, and empties the journal.
pub fn cut_power(journal: &Path, tearing: Option<&mut Rng>) -> Rolled {
    let bytes = std::fs::read(journal).unwrap_or_default();
    let rolled = roll_back(&parse(&bytes), tearing).expect("roll the store's files back");
    std::fs::write(journal, b"").expect("empty the powercut journal");
    rolled
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes files and journals them as `powercut.c` would.
    #[derive(Default)]
    struct Journalled(Vec<Record>);

    impl Journalled {
        fn record(&mut self, path: &Path, entry: Entry) {
            self.0.push(Record { path: path.to_owned(), entry });
        }

        fn create(&mut self, path: &Path) {
            std::fs::File::create(path).expect("create");
            self.record(path, Entry::Created);
        }

        fn write(&mut self, path: &Path, offset: u64, new: &[u8]) {
            let before = std::fs::read(path).expect("read");
            let start = (offset as usize).min(before.len());
            let end = (offset as usize + new.len()).min(before.len());
            let old = before[start..end].to_vec();
            let entry = Entry::Write { offset, size_before: before.len() as u64, old, new: new.to_vec() };
            self.record(path, entry);
            OpenOptions::new().write(true).open(path).expect("open").write_all_at(new, offset).expect("write");
        }

        fn truncate(&mut self, path: &Path, size: u64) {
            let before = std::fs::read(path).expect("read");
            let cut = before.get(size as usize..).unwrap_or_default().to_vec();
            self.record(path, Entry::Truncate { size_before: before.len() as u64, size, cut });
            OpenOptions::new().write(true).open(path).expect("open").set_len(size).expect("truncate");
        }
    }

    #[test]
    fn unsynced_writes_and_truncates_are_undone_newest_first() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("db");
        let mut journal = Journalled::default();
        journal.create(&path);
        journal.record(dir.path(), Entry::DirSync);
        journal.write(&path, 0, b"hello");
        journal.record(&path, Entry::Sync);
        journal.write(&path, 3, b"LO world");
        journal.truncate(&path, 2);
        journal.write(&path, 10, b"far");
        journal.truncate(&path, 20);
        assert_eq!(std::fs::read(&path).unwrap().len(), 20, "the changes were made");
        let rolled = roll_back(&journal.0, None).expect("roll back");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello", "back to the synced bytes and size");
        assert_eq!(rolled, Rolled { undone: 4, deleted: 0, reapplied: 0 });
    }

    #[test]
    fn a_file_is_deleted_unless_its_directory_was_synced_after_its_creation() {
        let dir = tempfile::tempdir().expect("a directory");
        let (kept, lost, late) = (dir.path().join("kept"), dir.path().join("lost"), dir.path().join("late"));
        let mut journal = Journalled::default();
        journal.create(&kept);
        journal.create(&lost);
        journal.record(&lost, Entry::Sync);
        journal.record(dir.path(), Entry::DirSync);
        journal.create(&late);
        journal.write(&late, 0, b"synced, but its name never was");
        journal.record(&late, Entry::Sync);
        // `lost` was created before the directory sync, so it survives too.
        let rolled = roll_back(&journal.0, None).expect("roll back");
        assert!(kept.exists() && lost.exists(), "created before the directory's fsync");
        assert!(!late.exists(), "created after the directory's last fsync");
        assert_eq!(rolled.deleted, 1);
    }

    #[test]
    fn torn_writes_put_back_whole_sectors_of_old_or_new_bytes() {
        let mut saw = (false, false);
        for seed in 0..32 {
            let dir = tempfile::tempdir().expect("a directory");
            let path = dir.path().join("wal");
            let mut journal = Journalled::default();
            journal.create(&path);
            journal.record(dir.path(), Entry::DirSync);
            journal.write(&path, 0, &[1; 2048]);
            journal.record(&path, Entry::Sync);
            journal.write(&path, 256, &[2; 1536]);
            roll_back(&journal.0, Some(&mut Rng::new(seed))).expect("roll back");
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len(), 2048, "seed {seed}: the write did not change the size");
            let outside = bytes[..256].iter().chain(&bytes[1792..]);
            assert!(outside.copied().all(|b| b == 1), "seed {seed}: bytes outside the write stay");
            // Within the write, each sector part is wholly old or wholly new.
            for part in [&bytes[256..512], &bytes[512..1024], &bytes[1024..1536], &bytes[1536..1792]] {
                let (old, new) = (part.iter().all(|&b| b == 1), part.iter().all(|&b| b == 2));
                assert!(old || new, "seed {seed}: a sector mixes old and new bytes");
                saw = (saw.0 || old, saw.1 || new);
            }
        }
        assert!(saw.0 && saw.1, "over 32 seeds, some sectors were put back and some were not");
    }

    #[test]
    fn a_record_cut_short_is_dropped() {
        let mut bytes = vec![b'S', 3, 0, 0, 0];
        bytes.extend_from_slice(b"/db");
        let whole = bytes.len();
        bytes.extend_from_slice(&[b'W', 3, 0, 0, 0]);
        bytes.extend_from_slice(b"/db");
        bytes.extend_from_slice(&7u64.to_le_bytes());
        let records = parse(&bytes);
        assert_eq!(records, [Record { path: "/db".into(), entry: Entry::Sync }]);
        assert_eq!(parse(&bytes[..whole]).len(), 1);
    }
}
