//! Rebuilds the crate when the embedded `qualifications/` folder changes
//! (`include_dir!` alone does not tell Cargo about the files it reads).

fn main() {
    println!("cargo:rerun-if-changed=../../qualifications");
}
