//! The memory this process may still use: the machine's `MemAvailable`, bounded by the
//! memory limits of the control groups it runs in. Under Slurm (its cgroup plugin), a
//! container or a systemd slice the machine's free memory is not the job's: a job that
//! trusted /proc/meminfo alone would pass its checks and then be killed by the kernel's
//! OOM killer at its cgroup's limit.
//!
//! Per hierarchy that controls memory (cgroup v2, and v1's `memory` controller), the
//! process's group and every ancestor up to the hierarchy's mount: headroom = limit −
//! (usage − inactive file pages), the smallest counting. Inactive file pages are cache
//! the kernel reclaims before it kills (the working set, as container runtimes count it).

use std::path::{Path, PathBuf};

/// Bytes of memory available now to this process, if known: `MemAvailable` from
/// /proc/meminfo, bounded by its control groups' headroom.
pub(crate) fn available() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| meminfo_available(&t));
    let groups = match (
        std::fs::read_to_string("/proc/self/cgroup"),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) {
        (Ok(cg), Ok(mi)) => cgroup_headroom(&cg, &mi),
        _ => None,
    };
    match (machine, groups) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `MemAvailable:` of a /proc/meminfo text, in bytes.
fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Which cgroup version a hierarchy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The smallest headroom over the memory-controlling hierarchies of a process whose
/// /proc/self/cgroup and /proc/self/mountinfo read `cgroup` and `mountinfo`; None where no
/// group on the way has a limit (or none can be read).
fn cgroup_headroom(cgroup: &str, mountinfo: &str) -> Option<u64> {
    memory_groups(cgroup, mountinfo)
        .into_iter()
        .filter_map(|(dir, mount, v)| headroom(&dir, &mount, v))
        .min()
}

/// The process's group directory in each mounted hierarchy that controls memory, with
/// that hierarchy's mount point.
fn memory_groups(cgroup: &str, mountinfo: &str) -> Vec<(PathBuf, PathBuf, Version)> {
    // Mounts: (version, mount root within the hierarchy, mount point).
    let mut mounts: Vec<(Version, &str, &str)> = Vec::new();
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let post: Vec<&str> = post.split_whitespace().collect();
        let (Some(&root), Some(&point), Some(&fstype)) = (pre.get(3), pre.get(4), post.first())
        else {
            continue;
        };
        let options = post.get(2).copied().unwrap_or("");
        match fstype {
            "cgroup2" => mounts.push((Version::V2, root, point)),
            "cgroup" if options.split(',').any(|o| o == "memory") => {
                mounts.push((Version::V1, root, point));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for line in cgroup.lines() {
        // hierarchy-ID:controllers:path
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let v = if id == "0" && controllers.is_empty() {
            Version::V2
        } else if controllers.split(',').any(|c| c == "memory") {
            Version::V1
        } else {
            continue;
        };
        for &(mv, root, point) in mounts.iter().filter(|m| m.0 == v) {
            // The mount shows the hierarchy from `root` down (a container's namespace, a
            // bind mount): the group's path below it.
            let below = if root == "/" {
                Some(path)
            } else {
                path.strip_prefix(root)
                    .filter(|r| r.is_empty() || r.starts_with('/'))
            };
            if let Some(below) = below {
                let dir = Path::new(point).join(below.trim_start_matches('/'));
                out.push((dir, PathBuf::from(point), mv));
                break;
            }
        }
    }
    out
}

/// The smallest headroom of `dir` and its ancestors up to `mount` (inclusive).
fn headroom(dir: &Path, mount: &Path, v: Version) -> Option<u64> {
    let mut best: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at {
        if !d.starts_with(mount) {
            break;
        }
        if let Some(h) = group_headroom(d, v) {
            best = Some(best.map_or(h, |b| b.min(h)));
        }
        if d == mount {
            break;
        }
        at = d.parent();
    }
    best
}

/// One group's limit − working set; None without a limit (or files to read).
fn group_headroom(d: &Path, v: Version) -> Option<u64> {
    let read = |name: &str| std::fs::read_to_string(d.join(name)).ok();
    let (limit, usage, inactive_key) = match v {
        Version::V2 => (
            read("memory.max")?,
            read("memory.current")?,
            "inactive_file",
        ),
        Version::V1 => (
            read("memory.limit_in_bytes")?,
            read("memory.usage_in_bytes")?,
            "total_inactive_file",
        ),
    };
    let limit: u64 = limit.trim().parse().ok()?; // "max": no limit
    // v1 writes "no limit" as the largest page-aligned i64.
    if limit >= (i64::MAX as u64) & !0xFFF {
        return None;
    }
    let usage: u64 = usage.trim().parse().ok()?;
    let inactive = read("memory.stat")
        .and_then(|s| {
            s.lines().find_map(|l| {
                let (k, n) = l.split_once(' ')?;
                (k == inactive_key).then(|| n.trim().parse::<u64>().ok())?
            })
        })
        .unwrap_or(0);
    Some(limit.saturating_sub(usage.saturating_sub(inactive)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory, removed at drop.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!("titus-avail-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
        fn write(&self, rel: &str, text: &str) {
            let f = self.0.join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn meminfo_gives_bytes() {
        let t = "MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(meminfo_available(t), Some(1_024_000));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn a_v2_job_step_is_bounded_by_its_jobs_limit() {
        // Slurm's layout: a job group with a limit, its step below without one.
        let s = Scratch::new("v2");
        let job = "system.slice/slurmstepd.scope/job_42";
        s.write(&format!("{job}/memory.max"), &format!("{}\n", 4 * GIB));
        s.write(&format!("{job}/memory.current"), &format!("{}\n", 3 * GIB));
        s.write(
            &format!("{job}/memory.stat"),
            &format!("anon 1\ninactive_file {}\nactive_file 5\n", GIB / 2),
        );
        s.write(&format!("{job}/step_0/memory.max"), "max\n");
        s.write(&format!("{job}/step_0/memory.current"), "100\n");
        s.write("memory.max", "max\n");
        let mount = s.0.display().to_string();
        let mountinfo = format!(
            "25 1 0:22 / /proc rw - proc proc rw\n\
             30 24 0:26 / {mount} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        );
        let cgroup = format!("0::/{job}/step_0\n");
        // 4 GiB − (3 GiB − 0.5 GiB of inactive cache).
        assert_eq!(
            cgroup_headroom(&cgroup, &mountinfo),
            Some(4 * GIB - 5 * GIB / 2)
        );
        // No limit anywhere: nothing to say.
        s.write(&format!("{job}/memory.max"), "max\n");
        assert_eq!(cgroup_headroom(&cgroup, &mountinfo), None);
    }

    #[test]
    fn a_v1_memory_controller_counts_and_no_limit_is_none() {
        let s = Scratch::new("v1");
        let group = "process_api/abc";
        s.write(
            &format!("{group}/memory.limit_in_bytes"),
            &format!("{}\n", 2 * GIB),
        );
        s.write(
            &format!("{group}/memory.usage_in_bytes"),
            &format!("{}\n", 3 * GIB),
        );
        s.write("memory.limit_in_bytes", "9223372036854771712\n");
        s.write("memory.usage_in_bytes", "5\n");
        let mount = s.0.display().to_string();
        let mountinfo = format!(
            "31 24 0:27 / {mount} rw,nosuid - cgroup cgroup rw,memory\n\
             32 24 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        );
        let cgroup = format!("5:cpu:/\n4:memory:/{group}\n0::/\n");
        // Over its limit (usage above it): no headroom at all, not a wrapped huge one.
        assert_eq!(cgroup_headroom(&cgroup, &mountinfo), Some(0));
        let at_root = "4:memory:/\n".to_string();
        assert_eq!(cgroup_headroom(&at_root, &mountinfo), None);
    }

    #[test]
    fn a_namespaced_mount_shows_the_group_at_its_root() {
        // A container: the hierarchy is mounted from the container's group, whose path
        // /proc/self/cgroup gives relative to the namespace ("/").
        let s = Scratch::new("ns");
        s.write("memory.max", &format!("{}\n", GIB));
        s.write("memory.current", &format!("{}\n", GIB / 4));
        let mount = s.0.display().to_string();
        let mountinfo = format!("40 30 0:30 / {mount} rw - cgroup2 cgroup2 rw\n");
        assert_eq!(cgroup_headroom("0::/\n", &mountinfo), Some(3 * GIB / 4));
        // A bind mount of a subtree: paths outside it are not found there.
        let sub = format!("40 30 0:30 /kubepods/pod1 {mount} rw - cgroup2 cgroup2 rw\n");
        assert_eq!(
            cgroup_headroom("0::/kubepods/pod1\n", &sub),
            Some(3 * GIB / 4)
        );
        assert_eq!(cgroup_headroom("0::/elsewhere\n", &sub), None);
        // Garbage reads as nothing known.
        assert_eq!(cgroup_headroom("nonsense", "more nonsense"), None);
    }
}
