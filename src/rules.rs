//! Rule files: strict TOML, loading, validation and the matcher.
