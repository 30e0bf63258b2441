//! Generates the NRI and ttrpc message types from `proto/` (pure Rust, no `protoc`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=proto");
    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .inputs(["proto/nri/api.proto", "proto/ttrpc/ttrpc.proto"])
        .cargo_out_dir("protos")
        .run_from_script();
}
