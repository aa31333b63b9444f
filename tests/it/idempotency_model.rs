//! The randomized model test of IdempotencyService (being written).
