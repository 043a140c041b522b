//! aurora (skeleton; being written).
