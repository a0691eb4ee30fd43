//! siphon-view: joined documents kept incrementally. A view is a root table with to-one
//! joins (`orders.customer_id → customers`) and to-many joins (`line_items.order_id →
//! orders`), two levels deep at most ([`ViewConfig`]). [`View`] keeps the current rows of
//! the joined tables and, for each join, which rows point to which, in an embedded store on
//! disk (redb); each source transaction's changes update that state and give back the
//! documents of exactly the roots they touched, each once, built from the state after the
//! whole transaction ([`View::apply`]).

mod config;
mod document;
mod view;

pub use config::{ManyConfig, OneConfig, ViewConfig};
pub use document::document_table;
pub use view::{Document, View};

/// What went wrong in a view.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The view's settings do not fit the tables (a join target without a one-column
    /// primary key, a table named twice as a root's parent, too deep): fixing the
    /// configuration helps, retrying does not.
    #[error("{0}")]
    Config(String),
    /// The store on disk failed (full, unreadable); retrying may help once it is fixed.
    #[error("the view's store: {0}")]
    Store(String),
}

impl ViewError {
    /// Whether trying again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ViewError::Store(_))
    }
}

impl From<redb::Error> for ViewError {
    fn from(e: redb::Error) -> Self {
        ViewError::Store(e.to_string())
    }
}

macro_rules! store_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for ViewError {
            fn from(e: $t) -> Self {
                ViewError::Store(e.to_string())
            }
        }
    )*};
}
store_errors!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
