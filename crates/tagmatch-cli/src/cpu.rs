//! `--cpu N|any` of `tagmatch bench match` and `tagmatch perf`: pinning a single-threaded
//! measurement to one CPU, so that the scheduler does not move it, mid-run, to a core
//! whose caches hold none of it (`ucx_perftest -c`; matching-notes §4.2: "Use one core").

/// What `--cpu` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cpu {
    /// No pinning (`any`).
    Any,
    /// The CPU the command runs on when it starts.
    Current,
    /// This CPU.
    Number(usize),
}

/// Parses `--cpu`'s value; `None` (not given) is `default`.
pub fn parse(value: Option<&str>, default: Cpu) -> Result<Cpu, String> {
    match value {
        None => Ok(default),
        Some("any") => Ok(Cpu::Any),
        Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
            .parse()
            .map(Cpu::Number)
            .map_err(|_| format!("--cpu {s}: not a CPU number")),
        Some(s) => Err(format!("--cpu {s:?}: expected a CPU number or any")),
    }
}

/// Pins the calling thread as `cpu` says. An error names the CPU and the CPUs the process
/// may run on.
#[cfg(target_os = "linux")]
pub fn pin(cpu: Cpu) -> Result<(), String> {
    use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let n = match cpu {
        Cpu::Any => return Ok(()),
        Cpu::Number(n) => n,
        Cpu::Current => sched_getcpu().map_err(|e| format!("sched_getcpu: {e}"))?,
    };
    let allowed =
        sched_getaffinity(Pid::from_raw(0)).map_err(|e| format!("sched_getaffinity: {e}"))?;
    if n >= CpuSet::count() || !allowed.is_set(n).unwrap_or(false) {
        let list: Vec<String> = (0..CpuSet::count())
            .filter(|&i| allowed.is_set(i).unwrap_or(false))
            .map(|i| i.to_string())
            .collect();
        return Err(format!(
            "--cpu {n}: not a CPU this process may run on (allowed: {})",
            list.join(",")
        ));
    }
    let mut set = CpuSet::new();
    set.set(n).map_err(|e| format!("--cpu {n}: {e}"))?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("--cpu {n}: {e}"))
}

/// Without `sched_setaffinity`: nothing is pinned; a CPU named explicitly is an error.
#[cfg(not(target_os = "linux"))]
pub fn pin(cpu: Cpu) -> Result<(), String> {
    match cpu {
        Cpu::Any | Cpu::Current => Ok(()),
        Cpu::Number(n) => Err(format!("--cpu {n}: pinning needs Linux; use --cpu any")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers_any_and_the_default() {
        assert_eq!(parse(None, Cpu::Current), Ok(Cpu::Current));
        assert_eq!(parse(None, Cpu::Any), Ok(Cpu::Any));
        assert_eq!(parse(Some("any"), Cpu::Current), Ok(Cpu::Any));
        assert_eq!(parse(Some("3"), Cpu::Any), Ok(Cpu::Number(3)));
        for bad in ["", "+1", "-1", "x", "1,2", "99999999999999999999999"] {
            assert!(parse(Some(bad), Cpu::Any).is_err(), "{bad:?}");
        }
    }
}
