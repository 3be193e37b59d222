//! Generates the gRPC code for go-plugin's services and the instance group from `proto/`
//! with protox (a pure-Rust protobuf compiler: no system `protoc` is needed).

use std::error::Error;

const PROTOS: &[&str] = &[
    "proto/grpc/health/v1/health.proto",
    "proto/plugin/grpc_controller.proto",
    "proto/plugin/grpc_stdio.proto",
    "proto/plugin/grpc_broker.proto",
    "proto/gantry/fleeting/v1/instance_group.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    let mut descriptors = protox::compile(PROTOS, ["proto"])?;
    // google/protobuf/empty.proto comes from protox's bundled well-known types; prost maps
    // google.protobuf.Empty to `()`, so no code is generated for it.
    descriptors
        .file
        .retain(|file| !file.name().starts_with("google/protobuf/"));
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
