//! MemoryService: PutItems, GetItems, SearchItems, ListPaths and
//! DeleteItems. Each RPC checks its request into `memory` values (naming
//! the field it rejects, e.g. `writes[2].vectors[0].values`), asks the
//! writer or the store, and converts the answer back. Writes go through the
//! group-commit writer; a read that refreshes times to live reads first,
//! then refreshes, through the writer, only the items it returns that have
//! one, and answers once that committed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::pb::memory_service_server::MemoryService;
use super::pb::{self, *};
use super::{Call, Shared, timestamp, validate};
use crate::config::sections::MemoryLimits;
use crate::domain::error::{Error, InvalidReason, Result};
use crate::domain::memory::filter::Filter;
use crate::domain::memory::search::Searched;
use crate::domain::memory::{
    ANY_LABEL, End, ItemPut, ItemWrite, ItemsPut, ItemsQuery, ItemsTouch, Path, PathMatch, PathsQuery, StoredItem,
    Vector,
};
use crate::domain::rpc::Rpc;

/// Longest label of a path, and longest field name of a vector, in bytes.
pub const LABEL_BYTES_MAX: usize = 256;
/// Longest key of an item, in bytes.
pub const ITEM_KEY_BYTES_MAX: usize = 1024;
/// Most conditions one ListPaths may carry.
pub const PATH_MATCHES_MAX: usize = 8;
/// Largest offset of a search or a listing.
pub const OFFSET_MAX: i32 = 1_000_000;
/// Longest time to live: a hundred years.
const TTL_MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Shortest time to live.
const TTL_MIN_NS: i64 = 1_000_000;
/// Results of a search that names no limit.
const SEARCH_LIMIT_DEFAULT: u32 = 10;
/// Paths of a listing that names no limit.
const PATHS_LIMIT_DEFAULT: u32 = 100;

/// The MemoryService implementation.
pub struct MemoryApi {
    shared: Arc<Shared>,
}

impl MemoryApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        MemoryApi { shared }
    }

    fn limits(&self) -> MemoryLimits {
        self.shared.limits().memory
    }

    async fn put_items(&self, namespace: String, req: PutItemsRequest) -> Result<PutItemsResponse> {
        let limits = self.limits();
        count("writes", req.writes.len(), 1, limits.items_per_request_max, "writes")?;
        let writes = req
            .writes
            .into_iter()
            .enumerate()
            .map(|(i, write)| item_write(&format!("writes[{i}]"), write, &limits))
            .collect::<Result<Vec<_>>>()?;
        let put = ItemsPut { namespace, writes };
        let written = put.writes.len() as u64;
        let recorded_at = self.shared.writer()?.put_items(put).await?;
        self.shared.metrics().memory_items_written.increment(written);
        Ok(PutItemsResponse { recorded_at: Some(timestamp(recorded_at)) })
    }

    async fn get_items(&self, namespace: String, req: GetItemsRequest) -> Result<GetItemsResponse> {
        let limits = self.limits();
        count("items", req.items.len(), 1, limits.items_per_request_max, "addresses")?;
        let addresses = req
            .items
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                Ok((path(&format!("items[{i}].path"), a.path, 1, &limits)?, key(&format!("items[{i}].key"), a.key)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let items = self.shared.store()?.get_items(&namespace, &addresses).await?;
        self.refresh(&namespace, req.refresh_ttl, items.iter()).await?;
        Ok(GetItemsResponse { items: items.into_iter().map(to_pb).collect() })
    }

    async fn search_items(&self, namespace: String, req: SearchItemsRequest) -> Result<SearchItemsResponse> {
        let limits = self.limits();
        let prefix = path("path_prefix", req.path_prefix, 0, &limits)?;
        let filter = match validate::json_object("filter", req.filter, limits.value_bytes_max)? {
            None => None,
            Some(text) => {
                Some(Filter::parse(&text).map_err(|why| Error::invalid("filter", InvalidReason::Malformed, why))?)
            }
        };
        let query = match req.query_vector.is_empty() {
            true => None,
            false => Some(values("query_vector", req.query_vector, &limits)?),
        };
        let query = ItemsQuery {
            namespace,
            prefix,
            filter,
            query,
            limit: limit(req.limit, SEARCH_LIMIT_DEFAULT, limits.search_results_max)?,
            offset: offset(req.offset)?,
        };
        let Searched { hits, scan } = self.shared.store()?.search_items(&query).await?;
        self.shared.metrics().memory_search(scan);
        self.refresh(&query.namespace, req.refresh_ttl, hits.iter().map(|hit| &hit.item)).await?;
        let hits = hits.into_iter().map(|hit| SearchHit { item: Some(to_pb(hit.item)), score: hit.score }).collect();
        Ok(SearchItemsResponse { hits })
    }

    /// With `refresh`, moves the expiry of those of `items` that have a time
    /// to live, through the writer; nothing when none has.
    async fn refresh<'i>(
        &self,
        namespace: &str,
        refresh: bool,
        items: impl Iterator<Item = &'i StoredItem>,
    ) -> Result<()> {
        let items: Vec<(Path, String)> = items
            .filter(|item| refresh && item.ttl.is_some())
            .map(|item| (item.path.clone(), item.key.clone()))
            .collect();
        if !items.is_empty() {
            self.shared.writer()?.touch_items(ItemsTouch { namespace: namespace.to_owned(), items }).await?;
        }
        Ok(())
    }

    async fn list_paths(&self, namespace: String, req: ListPathsRequest) -> Result<ListPathsResponse> {
        let limits = self.limits();
        count("matches", req.matches.len(), 0, PATH_MATCHES_MAX, "conditions")?;
        let matches = req
            .matches
            .into_iter()
            .enumerate()
            .map(|(i, m)| path_match(&format!("matches[{i}]"), m, &limits))
            .collect::<Result<Vec<_>>>()?;
        let max_depth = match req.max_depth {
            0 => None,
            d if d > 0 && d as usize <= limits.path_depth_max => Some(d as usize),
            _ => {
                return Err(Error::invalid(
                    "max_depth",
                    InvalidReason::OutOfRange,
                    format!("must be 0 (whole paths) or 1..={} (--memory-path-depth-max)", limits.path_depth_max),
                ));
            }
        };
        let query = PathsQuery {
            namespace,
            matches,
            max_depth,
            limit: limit(req.limit, PATHS_LIMIT_DEFAULT, limits.search_results_max)?,
            offset: offset(req.offset)?,
        };
        let stored = self.shared.store()?.item_paths(&query.namespace, &query.fixed_prefix()).await?;
        let paths = query.page(stored).into_iter().map(|labels| pb::Path { labels }).collect();
        Ok(ListPathsResponse { paths })
    }

    async fn delete_items(&self, namespace: String, req: DeleteItemsRequest) -> Result<DeleteItemsResponse> {
        let prefix = path("path_prefix", req.path_prefix, 0, &self.limits())?;
        let deleted = self.shared.writer()?.delete_items(namespace, prefix).await?;
        Ok(DeleteItemsResponse { deleted })
    }
}

/// A list's length: `min..=max`, else named as `field` with what it holds.
fn count(field: &str, len: usize, min: usize, max: usize, what: &str) -> Result<()> {
    if len < min {
        return Err(Error::invalid(field, InvalidReason::Required, "is required"));
    }
    if len > max {
        return Err(Error::invalid(field, InvalidReason::TooLong, format!("must hold at most {max} {what}")));
    }
    Ok(())
}

/// A label (or a vector's field name): 1..=256 bytes, no control characters.
fn label(field: &str, value: String) -> Result<String> {
    validate::id(field, value, LABEL_BYTES_MAX, validate::Required)
}

/// An item's key: 1..=1024 bytes, no control characters.
fn key(field: &str, value: String) -> Result<String> {
    validate::id(field, value, ITEM_KEY_BYTES_MAX, validate::Required)
}

/// A path of at least `min` labels and at most --memory-path-depth-max.
fn path(field: &str, labels: Vec<String>, min: usize, limits: &MemoryLimits) -> Result<Path> {
    count(field, labels.len(), min, limits.path_depth_max, "labels (--memory-path-depth-max)")?;
    let labels =
        labels.into_iter().enumerate().map(|(i, l)| label(&format!("{field}[{i}]"), l)).collect::<Result<Vec<_>>>()?;
    Ok(Path::of(&labels))
}

/// One write of a PutItems.
fn item_write(field: &str, write: MemoryWrite, limits: &MemoryLimits) -> Result<ItemWrite> {
    let name = |part: &str| format!("{field}.{part}");
    let path = path(&name("path"), write.path, 1, limits)?;
    let key = key(&name("key"), write.key)?;
    if write.delete {
        if !write.value.is_empty() || !write.vectors.is_empty() || write.ttl.is_some() || write.replace_vectors {
            return Err(Error::invalid(
                name("delete"),
                InvalidReason::Malformed,
                "a delete carries no value, vectors, replace_vectors or ttl",
            ));
        }
        return Ok(ItemWrite { path, key, put: None });
    }
    let value = validate::json_object(&name("value"), write.value, limits.value_bytes_max)?
        .ok_or_else(|| Error::invalid(name("value"), InvalidReason::Required, "is required (a JSON object)"))?;
    count(
        &name("vectors"),
        write.vectors.len(),
        0,
        limits.vectors_per_item_max,
        "vectors (--memory-vectors-per-item-max)",
    )?;
    let mut fields = HashSet::new();
    let mut vectors = Vec::with_capacity(write.vectors.len());
    for (i, vector) in write.vectors.into_iter().enumerate() {
        let at = name(&format!("vectors[{i}]"));
        let vector_field = label(&format!("{at}.field"), vector.field)?;
        if !fields.insert(vector_field.clone()) {
            return Err(Error::invalid(format!("{at}.field"), InvalidReason::Malformed, "names a field twice"));
        }
        vectors.push(Vector { field: vector_field, values: values(&format!("{at}.values"), vector.values, limits)? });
    }
    let ttl = ttl(&name("ttl"), write.ttl)?;
    Ok(ItemWrite { path, key, put: Some(ItemPut { value, vectors, replace_vectors: write.replace_vectors, ttl }) })
}

/// A vector's numbers: 1..=--memory-dims-max, each finite.
fn values(field: &str, values: Vec<f32>, limits: &MemoryLimits) -> Result<Vec<f32>> {
    count(field, values.len(), 1, limits.dims_max, "numbers (--memory-dims-max)")?;
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(format!("{field}[{i}]"), InvalidReason::OutOfRange, "must be a finite number"));
    }
    Ok(values)
}

/// A time to live: absent or zero for none; else 1 ms..=100 years.
fn ttl(field: &str, value: Option<prost_types::Duration>) -> Result<Option<i64>> {
    match value {
        None => Ok(None),
        Some(d) if d.seconds == 0 && d.nanos == 0 => Ok(None),
        Some(d) => {
            let nanos = validate::duration(field, Some(d), Duration::ZERO, TTL_MAX)?;
            if nanos < TTL_MIN_NS {
                return Err(Error::invalid(field, InvalidReason::OutOfRange, "must be at least 1 ms (or 0 for none)"));
            }
            Ok(Some(nanos))
        }
    }
}

/// A ListPaths condition: an end, and its labels, `*` any one.
fn path_match(field: &str, m: pb::PathMatch, limits: &MemoryLimits) -> Result<PathMatch> {
    let end = match pb::path_match::End::try_from(m.end) {
        Ok(pb::path_match::End::Prefix) => End::Prefix,
        Ok(pb::path_match::End::Suffix) => End::Suffix,
        _ => {
            return Err(Error::invalid(
                format!("{field}.end"),
                InvalidReason::Required,
                "must be END_PREFIX or END_SUFFIX",
            ));
        }
    };
    let at = format!("{field}.labels");
    count(&at, m.labels.len(), 1, limits.path_depth_max, "labels (--memory-path-depth-max)")?;
    let labels =
        m.labels.into_iter().enumerate().map(|(i, l)| label(&format!("{at}[{i}]"), l)).collect::<Result<Vec<_>>>()?;
    debug_assert!(ANY_LABEL.len() <= LABEL_BYTES_MAX);
    Ok(PathMatch { end, labels })
}

/// A limit: 0 means `default`; otherwise 1..=`max` (--memory-search-results-max).
fn limit(value: i32, default: u32, max: u32) -> Result<u32> {
    match value {
        0 => Ok(default.min(max)),
        n if n > 0 && n as u32 <= max => Ok(n as u32),
        _ => Err(Error::invalid(
            "limit",
            InvalidReason::OutOfRange,
            format!("must be 0 (default) or 1..={max} (--memory-search-results-max)"),
        )),
    }
}

/// An offset: 0..=1,000,000.
fn offset(value: i32) -> Result<u32> {
    if !(0..=OFFSET_MAX).contains(&value) {
        return Err(Error::invalid("offset", InvalidReason::OutOfRange, format!("must be 0..={OFFSET_MAX}")));
    }
    Ok(value as u32)
}

fn to_pb(item: StoredItem) -> MemoryItem {
    let nanos = |ns: i64| prost_types::Duration {
        seconds: ns.div_euclid(1_000_000_000),
        nanos: ns.rem_euclid(1_000_000_000) as i32,
    };
    MemoryItem {
        path: item.path.labels(),
        key: item.key,
        value: item.value.into_bytes(),
        created_at: Some(timestamp(item.created_at)),
        updated_at: Some(timestamp(item.updated_at)),
        expires_at: item.expires_at.map(timestamp),
        ttl: item.ttl.map(nanos),
    }
}

#[tonic::async_trait]
impl MemoryService for MemoryApi {
    async fn put_items(&self, request: Request<PutItemsRequest>) -> Result<Response<PutItemsResponse>, Status> {
        let call = Call::new(Rpc::PutItems, &request, &request.get_ref().namespace);
        self.shared.answer(call, |namespace| MemoryApi::put_items(self, namespace, request.into_inner())).await
    }

    async fn get_items(&self, request: Request<GetItemsRequest>) -> Result<Response<GetItemsResponse>, Status> {
        let call = Call::new(Rpc::GetItems, &request, &request.get_ref().namespace);
        self.shared.answer(call, |namespace| MemoryApi::get_items(self, namespace, request.into_inner())).await
    }

    async fn search_items(
        &self,
        request: Request<SearchItemsRequest>,
    ) -> Result<Response<SearchItemsResponse>, Status> {
        let call = Call::new(Rpc::SearchItems, &request, &request.get_ref().namespace);
        self.shared.answer(call, |namespace| MemoryApi::search_items(self, namespace, request.into_inner())).await
    }

    async fn list_paths(&self, request: Request<ListPathsRequest>) -> Result<Response<ListPathsResponse>, Status> {
        let call = Call::new(Rpc::ListPaths, &request, &request.get_ref().namespace);
        self.shared.answer(call, |namespace| MemoryApi::list_paths(self, namespace, request.into_inner())).await
    }

    async fn delete_items(
        &self,
        request: Request<DeleteItemsRequest>,
    ) -> Result<Response<DeleteItemsResponse>, Status> {
        let call = Call::new(Rpc::DeleteItems, &request, &request.get_ref().namespace).audited(true);
        self.shared.answer(call, |namespace| MemoryApi::delete_items(self, namespace, request.into_inner())).await
    }
}
