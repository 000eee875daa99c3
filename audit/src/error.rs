//! The crate's one error type.

use threadstream_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// An input line that is not an event, or an event the aggregate refuses.
    #[error("line {line}: {message}")]
    Line { line: u64, message: String },
    /// A bad argument (time, speed, filter).
    #[error("{0}")]
    Invalid(String),
    /// Writing or reading a Parquet file failed.
    #[error("parquet: {0}")]
    Parquet(String),
}

impl From<parquet::errors::ParquetError> for AuditError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        AuditError::Parquet(e.to_string())
    }
}

impl From<sqlx::Error> for AuditError {
    fn from(e: sqlx::Error) -> Self {
        AuditError::Store(e.into())
    }
}
