//! RecordService: PutRecords, ListRecords, DeleteRecords and CopyTurn. Each
//! RPC checks its request into `records` values (naming the field of the
//! record it rejects, e.g. `records[3].id`), asks the writer or the store,
//! and converts the answer back. Writes go through the group-commit writer
//! like checkpoints; a fenced put is checked against its lease inside the
//! batch's transaction.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::pb::record_service_server::RecordService;
use super::pb::{self, *};
use super::validate::{Optional, Presence, Required};
use super::{Call, Shared, timestamp, validate};
use crate::config::sections::Limits;
use crate::domain::error::{Error, InvalidReason, Result};
use crate::domain::keys::Fence;
use crate::domain::limits;
use crate::domain::records::{self, NewRecord, RecordDelete, RecordPut, RecordQuery, Selection, StoredRecord};
use crate::domain::rpc::Rpc;

/// The RecordService implementation.
pub struct RecordApi {
    shared: Arc<Shared>,
}

impl RecordApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        RecordApi { shared }
    }

    async fn put_records(&self, namespace: String, req: PutRecordsRequest) -> Result<PutRecordsResponse> {
        let limits = self.shared.limits();
        if req.records.is_empty() {
            return Err(Error::invalid("records", InvalidReason::Required, "is required"));
        }
        let most = limits.records_per_request_max as usize;
        if req.records.len() > most {
            return Err(Error::invalid("records", InvalidReason::TooLong, format!("must hold at most {most} records")));
        }
        let records = req
            .records
            .into_iter()
            .enumerate()
            .map(|(i, record)| new_record(&format!("records[{i}]"), record, limits))
            .collect::<Result<Vec<_>>>()?;
        let fence = match req.fence {
            None => None,
            Some(fence) => {
                if fence.lease_token == 0 {
                    return Err(Error::invalid("fence.lease_token", InvalidReason::Required, "is required"));
                }
                let key = validate::id("fence.key", fence.key, limits::KEY_BYTES_MAX, Required)?;
                Some(Fence { namespace: namespace.clone(), key, lease_token: fence.lease_token })
            }
        };
        let put = RecordPut { namespace, records, fence };
        let count = put.records.len() as u64;
        let recorded_at = self.shared.writer()?.put_records(put).await??;
        self.shared.metrics().records_written.increment(count);
        Ok(PutRecordsResponse { recorded_at: Some(timestamp(recorded_at)) })
    }

    async fn list_records(&self, namespace: String, req: ListRecordsRequest) -> Result<ListRecordsResponse> {
        let limits = self.shared.limits();
        let optional = |field: &str, value: String| -> Result<Option<String>> {
            let value = validate::record_text(field, value, limits::RECORD_ID_BYTES_MAX, Optional)?;
            Ok((!value.is_empty()).then_some(value))
        };
        let turn_id = validate::id("turn_id", req.turn_id, limits::TURN_ID_BYTES_MAX, Optional)?;
        let scope = validate::record_text("scope", req.scope, limits::RECORD_ID_BYTES_MAX, Optional)?;
        let (after, within) = validate::records_after(&req.page_token, req.split_entries)?;
        let token_room = match req.split_entries {
            true => validate::RECORDS_CUT_TOKEN_BYTES_MAX,
            false => validate::RECORDS_TOKEN_BYTES_MAX,
        };
        let query = RecordQuery {
            namespace,
            turn_id: (!turn_id.is_empty()).then_some(turn_id),
            scope: (req.has_scope || !scope.is_empty()).then_some(scope),
            kind: validate::kind("kind", req.kind, Required)?,
            id: optional("id", req.id)?,
            before_id: optional("before_id", req.before_id)?,
            metadata_contains: validate::json_object(
                "metadata_contains",
                req.metadata_contains,
                limits.record_metadata_bytes_max,
            )?,
            children_kind: optional_kind("children_kind", req.children_kind)?,
            refs_kind: optional_kind("refs_kind", req.refs_kind)?,
            after,
            within,
            limit: validate::page_size(req.page_size, limits.page_size_default, limits.page_size_max)?,
            // The page's token comes beside its entries.
            bytes_max: limits.response_bytes_max.saturating_sub(token_room).max(1),
            split_entries: req.split_entries,
        };
        let (entries, more) = self.shared.store()?.list_records(&query).await?;
        let next_page_token = match entries.last() {
            Some(last) if more => validate::records_token(&last.cursor(), last.cut.as_ref()),
            _ => String::new(),
        };
        let entries = entries
            .into_iter()
            .map(|entry| pb::RecordEntry {
                // A continued entry's record came with its first piece.
                record: (!entry.continued).then(|| to_pb(entry.record)),
                children: entry.children.into_iter().map(to_pb).collect(),
                refs: entry.refs.into_iter().map(to_pb).collect(),
                cut: entry.cut.is_some(),
                continued: entry.continued,
            })
            .collect();
        Ok(ListRecordsResponse { entries, next_page_token })
    }

    async fn delete_records(&self, namespace: String, mut req: DeleteRecordsRequest) -> Result<DeleteRecordsResponse> {
        let limits = self.shared.limits();
        if req.turn_ids.len() > limits::DELETE_SELECTORS_MAX {
            let max = limits::DELETE_SELECTORS_MAX;
            return Err(Error::invalid("turn_ids", InvalidReason::TooLong, format!("must hold at most {max} turns")));
        }
        let turn_ids = std::mem::take(&mut req.turn_ids)
            .into_iter()
            .enumerate()
            .map(|(i, turn_id)| validate::id(&format!("turn_ids[{i}]"), turn_id, limits::TURN_ID_BYTES_MAX, Required))
            .collect::<Result<Vec<_>>>()?;
        let selection = selection(req, &turn_ids, limits)?;
        let deleted = self
            .shared
            .writer()?
            .delete_records(RecordDelete { namespace, turn_ids, selection, idle_before: None })
            .await?;
        self.shared.metrics().records_removed.increment(deleted);
        Ok(DeleteRecordsResponse { deleted: i64::try_from(deleted).unwrap_or(i64::MAX) })
    }

    async fn copy_turn(&self, namespace: String, req: CopyTurnRequest) -> Result<CopyTurnResponse> {
        let source = validate::id("source_turn_id", req.source_turn_id, limits::TURN_ID_BYTES_MAX, Required)?;
        let target = validate::id("target_turn_id", req.target_turn_id, limits::TURN_ID_BYTES_MAX, Required)?;
        if source == target {
            return Err(Error::invalid("target_turn_id", InvalidReason::Malformed, "must differ from source_turn_id"));
        }
        let copied = self.shared.writer()?.copy_turn(namespace, source, target).await?;
        Ok(CopyTurnResponse { copied: i64::try_from(copied).unwrap_or(i64::MAX) })
    }
}

/// What a DeleteRecords selects beyond its turns: nothing (whole turns,
/// which then must be named) or a kind's records, narrowed by filters or
/// turns (a deletion across every turn needs a filter).
fn selection(req: DeleteRecordsRequest, turn_ids: &[String], limits: &Limits) -> Result<Option<Selection>> {
    let kind = validate::kind("kind", req.kind, Optional)?;
    if kind.is_empty() {
        let needs_kind = |field: &str| Error::invalid(field, InvalidReason::Malformed, "needs kind");
        if !req.metadata_any.is_empty() {
            return Err(needs_kind("metadata_any"));
        }
        if req.keep_latest {
            return Err(needs_kind("keep_latest"));
        }
        if turn_ids.is_empty() {
            return Err(Error::invalid("turn_ids", InvalidReason::Required, "is required without kind"));
        }
        return Ok(None);
    }
    if req.metadata_any.len() > limits::DELETE_SELECTORS_MAX {
        let max = limits::DELETE_SELECTORS_MAX;
        return Err(Error::invalid("metadata_any", InvalidReason::TooLong, format!("must hold at most {max} filters")));
    }
    if turn_ids.is_empty() && req.metadata_any.is_empty() {
        return Err(Error::invalid(
            "turn_ids",
            InvalidReason::Required,
            "is required unless metadata_any narrows the deletion",
        ));
    }
    let metadata_any = req
        .metadata_any
        .into_iter()
        .enumerate()
        .map(|(i, filter)| {
            let field = format!("metadata_any[{i}]");
            validate::json_object(&field, filter, limits.record_metadata_bytes_max)?
                .ok_or_else(|| Error::invalid(field, InvalidReason::Required, "is required"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Selection {
        kind,
        metadata_any,
        keep_latest: req.keep_latest,
        children_kind: optional_kind("children_kind", req.children_kind)?,
        refs_kind: optional_kind("refs_kind", req.refs_kind)?,
    }))
}

fn optional_kind(field: &str, value: String) -> Result<Option<String>> {
    let kind = validate::kind(field, value, Optional)?;
    Ok((!kind.is_empty()).then_some(kind))
}

/// A record of a PutRecords, checked; `field` names it (`records[i]`).
fn new_record(field: &str, r: pb::Record, limits: &Limits) -> Result<NewRecord> {
    let name = |part: &str| format!("{field}.{part}");
    let text = |part: &str, value: String, presence: Presence| {
        validate::record_text(&name(part), value, limits::RECORD_ID_BYTES_MAX, presence)
    };
    if r.refs.len() > limits::RECORD_REFS_MAX {
        let max = limits::RECORD_REFS_MAX;
        return Err(Error::invalid(name("refs"), InvalidReason::TooLong, format!("must hold at most {max} ids")));
    }
    let mut refs = Vec::with_capacity(r.refs.len());
    for (i, id) in r.refs.into_iter().enumerate() {
        let id = text(&format!("refs[{i}]"), id, Required)?;
        // A ref named twice is one reference.
        if !refs.contains(&id) {
            refs.push(id);
        }
    }
    let mode = match pb::PutMode::try_from(r.mode) {
        Ok(pb::PutMode::Unspecified | pb::PutMode::Upsert) => records::PutMode::Upsert,
        Ok(pb::PutMode::InsertIfAbsent) => records::PutMode::InsertIfAbsent,
        Ok(pb::PutMode::Create) => records::PutMode::Create,
        Ok(pb::PutMode::Update) => records::PutMode::Update,
        Err(_) => return Err(Error::invalid(name("mode"), InvalidReason::OutOfRange, "is not a PutMode value")),
    };
    let record = NewRecord {
        turn_id: validate::id(&name("turn_id"), r.turn_id, limits::TURN_ID_BYTES_MAX, Required)?,
        scope: text("scope", r.scope, Optional)?,
        kind: validate::kind(&name("kind"), r.kind, Required)?,
        id: text("id", r.id, Required)?,
        parent_id: text("parent_id", r.parent_id, Optional)?,
        content_type: validate::content_type(&name("content_type"), r.content_type, limits::CONTENT_TYPE_BYTES_MAX)?,
        payload: r.payload,
        metadata: validate::json_object(&name("metadata"), r.metadata, limits.record_metadata_bytes_max)?,
        refs: serde_json::to_string(&refs).expect("strings serialize"),
        mode,
    };
    check_size(field, &record, limits)?;
    Ok(record)
}

/// A record's size checks: its payload, metadata and refs within
/// --record-bytes-max, and the record listable. `field` names it.
fn check_size(field: &str, record: &NewRecord, limits: &Limits) -> Result<()> {
    let name = |part: &str| format!("{field}.{part}");
    let size = record.payload.len() + record.metadata.as_ref().map_or(0, String::len) + record.refs.len();
    if size > limits.record_bytes_max {
        return Err(Error::invalid(
            name("payload"),
            InvalidReason::TooLong,
            format!("with metadata and refs must be at most {} bytes (--record-bytes-max)", limits.record_bytes_max),
        ));
    }
    // A record must also be listable: alone in a ListRecords page, with its
    // addressing, framing and the longest page token, within what the
    // sidecar sends (--message-bytes-max). Postgres may print metadata
    // longer than it was written (jsonb's spaces), so it counts twice.
    let listed = record.bytes()
        + record.metadata.as_ref().map_or(0, String::len)
        + records::RECORD_OVERHEAD_BYTES
        + validate::RECORDS_CUT_TOKEN_BYTES_MAX;
    if listed > limits.message_bytes_max {
        let room = limits.message_bytes_max.saturating_sub(listed - size);
        return Err(Error::invalid(
            name("payload"),
            InvalidReason::TooLong,
            format!(
                "with metadata and refs must be at most {room} bytes here, so that a ListRecords page holding \
                 the record, its ids and a page token fits --message-bytes-max ({} bytes)",
                limits.message_bytes_max
            ),
        ));
    }
    Ok(())
}

fn to_pb(stored: StoredRecord) -> pb::Record {
    let r = stored.record;
    pb::Record {
        turn_id: r.turn_id,
        scope: r.scope,
        kind: r.kind,
        id: r.id,
        parent_id: r.parent_id,
        payload: r.payload,
        content_type: r.content_type,
        metadata: r.metadata.map(String::into_bytes).unwrap_or_default(),
        refs: serde_json::from_str(&r.refs).unwrap_or_default(),
        mode: pb::PutMode::Unspecified as i32,
        recorded_at: Some(timestamp(stored.recorded_at)),
    }
}

#[tonic::async_trait]
impl RecordService for RecordApi {
    async fn put_records(&self, request: Request<PutRecordsRequest>) -> Result<Response<PutRecordsResponse>, Status> {
        let call = Call::new(Rpc::PutRecords, &request, &request.get_ref().namespace);
        self.shared.answer(call, |namespace| RecordApi::put_records(self, namespace, request.into_inner())).await
    }

    async fn list_records(
        &self,
        request: Request<ListRecordsRequest>,
    ) -> Result<Response<ListRecordsResponse>, Status> {
        let call =
            Call::new(Rpc::ListRecords, &request, &request.get_ref().namespace).turn_id(&request.get_ref().turn_id);
        self.shared.answer(call, |namespace| RecordApi::list_records(self, namespace, request.into_inner())).await
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let call = Call::new(Rpc::DeleteRecords, &request, &request.get_ref().namespace).audited(true);
        self.shared.answer(call, |namespace| RecordApi::delete_records(self, namespace, request.into_inner())).await
    }

    async fn copy_turn(&self, request: Request<CopyTurnRequest>) -> Result<Response<CopyTurnResponse>, Status> {
        let call =
            Call::new(Rpc::CopyTurn, &request, &request.get_ref().namespace).turn_id(&request.get_ref().target_turn_id);
        self.shared.answer(call, |namespace| RecordApi::copy_turn(self, namespace, request.into_inner())).await
    }
}
