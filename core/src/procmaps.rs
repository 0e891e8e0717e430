//! This process's memory map (`/proc/self/maps`), read when a slow path needs it: which
//! addresses are code, and which file a code address comes from. Unlike `dladdr`, reading it
//! takes no lock of the dynamic loader (a thread in `dlopen` runs constructors under that lock,
//! and they may lock what a waiting thread holds).

pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub exec: bool,
    /// Mapped shared (`MAP_SHARED`, System V or POSIX shared memory): other processes may map
    /// the same pages.
    pub shared: bool,
    pub offset: u64,
    pub path: String,
}

/// The current mappings (empty if /proc is not readable).
pub fn read() -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    text.lines().filter_map(parse).collect()
}

fn parse(line: &str) -> Option<Mapping> {
    let mut f = line.split_ascii_whitespace();
    let (lo, hi) = f.next()?.split_once('-')?;
    let perms = f.next()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let _dev = f.next()?;
    let _inode = f.next()?;
    let path = f.collect::<Vec<_>>().join(" ");
    Some(Mapping {
        start: u64::from_str_radix(lo, 16).ok()?,
        end: u64::from_str_radix(hi, 16).ok()?,
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        shared: perms.as_bytes().get(3) == Some(&b's'),
        offset,
        path,
    })
}

/// The file mapped at code address `addr` and its load base (the start of its mapping at file
/// offset 0).
pub fn module_of(maps: &[Mapping], addr: u64) -> Option<(&str, u64)> {
    let m = maps
        .iter()
        .find(|m| m.exec && (m.start..m.end).contains(&addr) && m.path.starts_with('/'))?;
    let base = maps
        .iter()
        .filter(|x| x.path == m.path && x.offset == 0)
        .map(|x| x.start)
        .min()?;
    Some((&m.path, base))
}

/// Whether `addr` lies in executable memory (the reference [`Code::contains`] is tested against).
#[cfg(test)]
pub fn is_code(maps: &[Mapping], addr: u64) -> bool {
    maps.iter()
        .any(|m| m.exec && (m.start..m.end).contains(&addr))
}

/// The executable ranges of a memory map, sorted, for many [`Code::contains`] questions: a
/// process with a thousand threads has thousands of mappings (a stack and its guard page each)
/// but a few dozen of code.
pub struct Code(Vec<(u64, u64)>);

impl Code {
    pub fn of(maps: &[Mapping]) -> Code {
        let mut v: Vec<(u64, u64)> = maps
            .iter()
            .filter(|m| m.exec)
            .map(|m| (m.start, m.end))
            .collect();
        v.sort_unstable();
        Code(v)
    }

    /// Whether `addr` lies in executable memory: as `is_code`, by binary search.
    pub fn contains(&self, addr: u64) -> bool {
        let i = self.0.partition_point(|&(start, _)| start <= addr);
        i > 0 && addr < self.0[i - 1].1
    }
}

/// Whether `addr` lies in memory mapped shared, which another process may write.
pub fn is_shared(maps: &[Mapping], addr: u64) -> bool {
    maps.iter()
        .any(|m| m.shared && (m.start..m.end).contains(&addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, exec: bool) -> Mapping {
        Mapping {
            start,
            end,
            exec,
            shared: false,
            offset: 0,
            path: String::new(),
        }
    }

    #[test]
    fn code_ranges_answer_as_the_linear_search_does() {
        let maps = vec![
            mapping(0x5000, 0x6000, true),
            mapping(0x1000, 0x2000, true),
            mapping(0x2000, 0x3000, false),
            mapping(0x7000, 0x7fff, true),
        ];
        let code = Code::of(&maps);
        for addr in [
            0, 0xfff, 0x1000, 0x1fff, 0x2000, 0x4fff, 0x5000, 0x6000, 0x7ffe, 0x7fff,
        ] {
            assert_eq!(code.contains(addr), is_code(&maps, addr), "{addr:#x}");
        }
    }
}
