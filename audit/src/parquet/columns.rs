//! Columns of the Parquet tables and a writer that fills them row by row. A table is declared
//! once, as a list of [`Column`]s: its Arrow schema (and so its Parquet schema) and its builders
//! both come from that list, and a row pushes its values in the list's order.

use std::io::Write;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::extension::Json;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::AuditError;

/// The type of a column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Text,
    /// JSON text, stored with Parquet's JSON logical type.
    Json,
    /// Epoch milliseconds, stored as a UTC timestamp (Parquet `TIMESTAMP(MILLIS, true)`).
    Time,
}

/// One column: its name, type and whether it may be null.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
    pub nullable: bool,
}

/// A column that always has a value.
pub const fn req(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        nullable: false,
    }
}

/// A column that may be null.
pub const fn opt(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        nullable: true,
    }
}

/// The Arrow schema of a table's columns.
pub fn schema(columns: &[Column]) -> SchemaRef {
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| match c.kind {
            Kind::Int => Field::new(c.name, DataType::Int64, c.nullable),
            Kind::Text => Field::new(c.name, DataType::Utf8, c.nullable),
            Kind::Json => {
                Field::new(c.name, DataType::Utf8, c.nullable).with_extension_type(Json::default())
            }
            Kind::Time => Field::new(
                c.name,
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                c.nullable,
            ),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

enum Builder {
    Int(Int64Builder),
    Text(StringBuilder),
    Time(TimestampMillisecondBuilder),
}

impl Builder {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Int => Builder::Int(Int64Builder::new()),
            Kind::Text | Kind::Json => Builder::Text(StringBuilder::new()),
            Kind::Time => Builder::Time(TimestampMillisecondBuilder::new().with_timezone("UTC")),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Text(b) => Arc::new(b.finish()),
            Builder::Time(b) => Arc::new(b.finish()),
        }
    }
}

/// Rows of one table being built, column by column. Each row gives one value per column, in the
/// table's order: [`Rows::int`], [`Rows::text`], [`Rows::time`] (`Kind::Json` takes `text`),
/// then [`Rows::end_row`].
pub struct Rows {
    columns: &'static [Column],
    builders: Vec<Builder>,
    /// The next column of the current row.
    at: usize,
    len: usize,
}

impl Rows {
    pub fn new(columns: &'static [Column]) -> Self {
        Rows {
            columns,
            builders: columns.iter().map(|c| Builder::new(c.kind)).collect(),
            at: 0,
            len: 0,
        }
    }

    fn next(&mut self) -> (&'static str, &mut Builder) {
        let name = self.columns[self.at].name;
        let b = &mut self.builders[self.at];
        self.at += 1;
        (name, b)
    }

    pub fn int(&mut self, v: Option<i64>) -> &mut Self {
        match self.next() {
            (_, Builder::Int(b)) => b.append_option(v),
            (name, _) => panic!("column {name} is not an integer"),
        }
        self
    }

    pub fn text(&mut self, v: Option<&str>) -> &mut Self {
        match self.next() {
            (_, Builder::Text(b)) => b.append_option(v),
            (name, _) => panic!("column {name} is not text"),
        }
        self
    }

    pub fn time(&mut self, v: Option<i64>) -> &mut Self {
        match self.next() {
            (_, Builder::Time(b)) => b.append_option(v),
            (name, _) => panic!("column {name} is not a time"),
        }
        self
    }

    pub fn end_row(&mut self) {
        assert_eq!(
            self.at,
            self.columns.len(),
            "a row gives every column one value"
        );
        self.at = 0;
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows so far as a batch; the builders start over.
    pub fn take_batch(&mut self, schema: &SchemaRef) -> Result<RecordBatch, AuditError> {
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        self.len = 0;
        RecordBatch::try_new(schema.clone(), arrays).map_err(|e| AuditError::Parquet(e.to_string()))
    }
}

/// Rows buffered before they are handed to the Parquet writer as one batch.
const BATCH_ROWS: usize = 16_384;

/// How every table is written: zstd (level 3) pages; a row group per million rows.
pub(crate) fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).expect("3 is a zstd level"),
        ))
        .set_created_by(format!("threadstream {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// One Parquet file of one table, written row by row.
pub struct TableWriter<W: Write + Send> {
    schema: SchemaRef,
    rows: Rows,
    writer: ArrowWriter<W>,
    written: u64,
}

impl<W: Write + Send> TableWriter<W> {
    pub fn new(columns: &'static [Column], out: W) -> Result<Self, AuditError> {
        let schema = schema(columns);
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(properties()))?;
        Ok(TableWriter {
            schema,
            rows: Rows::new(columns),
            writer,
            written: 0,
        })
    }

    /// The row being built; call [`TableWriter::row_done`] after its `end_row`.
    pub fn row(&mut self) -> &mut Rows {
        &mut self.rows
    }

    pub fn row_done(&mut self) -> Result<(), AuditError> {
        if self.rows.len() >= BATCH_ROWS {
            self.flush_rows()?;
        }
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<(), AuditError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let batch = self.rows.take_batch(&self.schema)?;
        self.written += batch.num_rows() as u64;
        self.writer.write(&batch)?;
        Ok(())
    }

    /// Rows given so far.
    pub fn rows(&self) -> u64 {
        self.written + self.rows.len() as u64
    }

    /// Writes what is buffered and the footer; returns the output and the number of rows.
    pub fn finish(mut self) -> Result<(W, u64), AuditError> {
        self.flush_rows()?;
        let out = self.writer.into_inner()?;
        Ok((out, self.written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[Column] = &[
        req("id", Kind::Int),
        opt("name", Kind::Text),
        req("at", Kind::Time),
        req("doc", Kind::Json),
    ];

    #[test]
    fn a_table_round_trips_with_its_logical_types() {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::basic::LogicalType;
        let mut w = TableWriter::new(COLUMNS, Vec::new()).unwrap();
        for i in 0..3 {
            w.row()
                .int(Some(i))
                .text((i != 1).then_some("n"))
                .time(Some(1_700_000_000_000 + i))
                .text(Some(r#"{"a":1}"#))
                .end_row();
            w.row_done().unwrap();
        }
        let (bytes, rows) = w.finish().unwrap();
        assert_eq!(rows, 3);
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes)).unwrap();
        let leaves = reader.parquet_schema().columns().to_vec();
        assert_eq!(leaves[3].logical_type_ref(), Some(&LogicalType::Json));
        assert!(matches!(
            leaves[2].logical_type_ref(),
            Some(LogicalType::Timestamp(t)) if t.is_adjusted_to_u_t_c
        ));
        let batches: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
        assert_eq!(batches[0].column(1).null_count(), 1);
    }

    #[test]
    #[should_panic(expected = "a row gives every column one value")]
    fn a_short_row_is_a_bug() {
        let mut rows = Rows::new(COLUMNS);
        rows.int(Some(1)).end_row();
    }
}
