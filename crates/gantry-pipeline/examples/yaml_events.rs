//! Prints libyaml's event stream of a YAML file as Gantry reads it (`yaml::libyaml_events`):
//! `cargo run -p gantry-pipeline --example yaml_events -- FILE` (or standard input). The
//! differential test compares the same listing with Ruby's Psych.

use std::io::Read as _;

fn main() -> std::io::Result<()> {
    let mut text = String::new();
    match std::env::args().nth(1) {
        Some(path) => text = std::fs::read_to_string(path)?,
        None => {
            std::io::stdin().read_to_string(&mut text)?;
        }
    }
    print!("{}", gantry_pipeline::yaml::libyaml_events(&text));
    Ok(())
}
