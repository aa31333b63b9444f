//! `sql_row!`: a row struct of the store's queries and its `sqlx::FromRow`,
//! each field read by its column name. A leaf of `store`, so that the
//! modules whose rows it declares (rows, waits, bulk, the Postgres keys)
//! import nothing of each other for it.

/// A struct whose fields are a query's columns, and its `sqlx::FromRow`:
/// each field read by its name, on either backend's rows. It is what
/// `#[derive(sqlx::FromRow)]` writes; that derive's proc-macro would build
/// both database drivers a second time, for the compiler.
macro_rules! sql_row {
    ($(#[$attr:meta])* $vis:vis struct $name:ident {
        $($(#[$field_attr:meta])* $field_vis:vis $field:ident : $ty:ty),* $(,)?
    }) => {
        $(#[$attr])*
        $vis struct $name {
            $($(#[$field_attr])* $field_vis $field: $ty),*
        }

        impl<'r, R: ::sqlx::Row> ::sqlx::FromRow<'r, R> for $name
        where
            &'r str: ::sqlx::ColumnIndex<R>,
            $($ty: ::sqlx::Decode<'r, R::Database> + ::sqlx::Type<R::Database>,)*
        {
            fn from_row(row: &'r R) -> Result<Self, ::sqlx::Error> {
                Ok($name { $($field: row.try_get(stringify!($field))?),* })
            }
        }
    };
}
pub(crate) use sql_row;
