//! Compiles the BPF programs in `bpf/*.bpf.c` with clang into OUT_DIR, where the crate embeds
//! them (`aya::include_bytes_aligned!`). upf-loadgen builds its programs with this script too.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dir = Path::new("bpf");
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("bpf/")
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    sources.sort();
    for src in &sources {
        println!("cargo:rerun-if-changed={}", src.display());
    }
    for src in sources
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
    {
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let obj = out.join(name.replace(".bpf.c", ".bpf.o"));
        compile(src, &obj);
    }
}

/// `clang -O2 -g -target bpf -c src -o obj`, with the multiarch include directory (asm/types.h)
/// that a BPF target does not search by itself.
fn compile(src: &Path, obj: &Path) {
    let clang = std::env::var("BPF_CLANG").unwrap_or_else(|_| "clang".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall"]);
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        cmd.arg(format!("-I{multiarch}"));
    }
    cmd.arg("-c").arg(src).arg("-o").arg(obj);
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => panic!(
            "{clang}: {e}: the BPF programs are built with clang; \
             install clang and libbpf-dev: scripts/setup.sh"
        ),
    };
    if !status.success() {
        panic!(
            "{clang} failed on {} ({status}); it needs clang and libbpf-dev's \
             <bpf/bpf_helpers.h>: scripts/setup.sh",
            src.display()
        );
    }
}
