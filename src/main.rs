fn main() {
    std::process::exit(ksymwatch::cli::main());
}
