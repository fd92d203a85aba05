//! The benchmark programs run and print what they promise (tiny sizes; figures come from
//! real runs, see the README).

use std::process::Command;

#[test]
fn runtime_bench_in_process_verifies_every_protocol() {
    let out = Command::new(env!("CARGO_BIN_EXE_runtime-bench"))
        .args([
            "--ranks",
            "3",
            "--tasks",
            "300",
            "--task-ms",
            "0.05",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(lines.len(), 3, "one report per protocol:\n{text}");
    for (l, p) in lines.iter().zip(["lock", "claim", "request"]) {
        for key in [
            format!("\"protocol\":\"{p}\""),
            "\"verified\":true".into(),
            "\"efficiency\":".into(),
            "\"steal_p50_us\":".into(),
        ] {
            assert!(l.contains(&key), "{key} missing: {l}");
        }
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_runtime-bench"))
        .args(["--protocol", "steal-everything"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown steal protocol"));
}

#[test]
fn overlay_bench_prints_every_case() {
    let out = Command::new(env!("CARGO_BIN_EXE_overlay-bench"))
        .args([
            "--pairs",
            "2000",
            "--scale-ranks",
            "20000",
            "--scale-pairs",
            "1000",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for case in [
        "titus",
        "non-64out",
        "non-64conn",
        "defaults-ring",
        "defaults-torus2",
        "defaults-torus3",
        "scale",
    ] {
        assert!(
            text.contains(&format!("\"case\":\"{case}\"")),
            "{case} missing:\n{text}"
        );
    }
}
