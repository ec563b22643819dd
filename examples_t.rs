use std::time::Instant;
fn main() {
    let ws = std::env::temp_dir().join("sbxtime-ws");
    std::fs::create_dir_all(&ws).unwrap();
    let pol = tern::sandbox::Policy { mode: tern::sandbox::Mode::WorkspaceWrite, workspace: ws.clone(), no_network: false, draft_file: None };
    for _ in 0..5 {
        let t = Instant::now(); for _ in 0..100 { let _ = tern::sandbox::landlock_abi(); } let a = t.elapsed()/100;
        let t = Instant::now(); for _ in 0..100 { let d = tempfile::Builder::new().prefix("x-").tempdir().unwrap(); drop(d); } let b = t.elapsed()/100;
        let t = Instant::now(); for _ in 0..100 { let p = tern::sandbox::prepare(&pol).unwrap(); drop(p); } let c = t.elapsed()/100;
        println!("probe {a:?} tempdir {b:?} prepare {c:?}");
    }
}
