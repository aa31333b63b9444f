//! Compiles the contract in `proto/stepwell/v1/` into Rust with protox, so no
//! system `protoc` is needed, and writes the file descriptor set that server
//! reflection serves. Requests decode through `crate::api::codec::Codec`,
//! which reports undecodable bytes as INVALID_ARGUMENT.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/stepwell/v1/checkpoint.proto",
        "proto/stepwell/v1/idempotency.proto",
        "proto/stepwell/v1/memory.proto",
        "proto/stepwell/v1/records.proto",
        "proto/stepwell/v1/waits.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    // The migrations are embedded by `store/migrations.rs`, whose test holds
    // its list to the folders: a new file alone compiles the crate again, so
    // that the test sees it.
    println!("cargo:rerun-if-changed=migrations");
    let fds = protox::compile(protos, ["proto"])?;
    // Cargo hands a build script its output directory in the environment.
    #[allow(clippy::disallowed_methods)]
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("stepwell_descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure().codec_path("crate::api::codec::Codec").compile_fds(fds)?;
    Ok(())
}
