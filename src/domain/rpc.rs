//! The RPCs of the contract's services, the role each needs, and
//! why a caller may be unknown: the vocabulary that authorization, metrics,
//! traces and the domain error share, with no behaviour of its own.

use std::fmt;

use serde::Deserialize;

/// What a grant allows, each role everything the one before it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Restore, ListTurns, Get.
    Read,
    /// Also Checkpoint, Begin, Complete, Release, Extend.
    Write,
    /// Also DeleteTurn.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every RPC that authorization knows, with the role it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    Checkpoint,
    Restore,
    ListTurns,
    DeleteTurn,
    Begin,
    Complete,
    Release,
    Extend,
    Get,
    PutRecords,
    ListRecords,
    DeleteRecords,
    CopyTurn,
    CreateWait,
    Signal,
    Await,
    GetWait,
    ListWaits,
    CancelWait,
    PutItems,
    GetItems,
    SearchItems,
    ListPaths,
    DeleteItems,
}

impl Rpc {
    /// Every RPC of the services, in the order of the contract.
    pub const ALL: [Rpc; 24] = [
        Rpc::Checkpoint,
        Rpc::Restore,
        Rpc::ListTurns,
        Rpc::DeleteTurn,
        Rpc::Begin,
        Rpc::Complete,
        Rpc::Release,
        Rpc::Extend,
        Rpc::Get,
        Rpc::PutRecords,
        Rpc::ListRecords,
        Rpc::DeleteRecords,
        Rpc::CopyTurn,
        Rpc::CreateWait,
        Rpc::Signal,
        Rpc::Await,
        Rpc::GetWait,
        Rpc::ListWaits,
        Rpc::CancelWait,
        Rpc::PutItems,
        Rpc::GetItems,
        Rpc::SearchItems,
        Rpc::ListPaths,
        Rpc::DeleteItems,
    ];

    /// The RPC a request path names (`/stepwell.v1.CheckpointService/Checkpoint`).
    pub fn from_path(path: &str) -> Option<Rpc> {
        let name = path.strip_prefix('/')?;
        Rpc::ALL.into_iter().find(|rpc| rpc.full_name() == name)
    }

    /// The full name of the service the RPC belongs to.
    pub fn service(self) -> &'static str {
        match self {
            Rpc::Checkpoint | Rpc::Restore | Rpc::ListTurns | Rpc::DeleteTurn => "stepwell.v1.CheckpointService",
            Rpc::Begin | Rpc::Complete | Rpc::Release | Rpc::Extend | Rpc::Get => "stepwell.v1.IdempotencyService",
            Rpc::PutRecords | Rpc::ListRecords | Rpc::DeleteRecords | Rpc::CopyTurn => "stepwell.v1.RecordService",
            Rpc::CreateWait | Rpc::Signal | Rpc::Await | Rpc::GetWait | Rpc::ListWaits | Rpc::CancelWait => {
                "stepwell.v1.WaitService"
            }
            Rpc::PutItems | Rpc::GetItems | Rpc::SearchItems | Rpc::ListPaths | Rpc::DeleteItems => {
                "stepwell.v1.MemoryService"
            }
        }
    }

    /// The RPC's full name, `service/method`: its server span's name.
    pub fn full_name(self) -> &'static str {
        match self {
            Rpc::Checkpoint => "stepwell.v1.CheckpointService/Checkpoint",
            Rpc::Restore => "stepwell.v1.CheckpointService/Restore",
            Rpc::ListTurns => "stepwell.v1.CheckpointService/ListTurns",
            Rpc::DeleteTurn => "stepwell.v1.CheckpointService/DeleteTurn",
            Rpc::Begin => "stepwell.v1.IdempotencyService/Begin",
            Rpc::Complete => "stepwell.v1.IdempotencyService/Complete",
            Rpc::Release => "stepwell.v1.IdempotencyService/Release",
            Rpc::Extend => "stepwell.v1.IdempotencyService/Extend",
            Rpc::Get => "stepwell.v1.IdempotencyService/Get",
            Rpc::PutRecords => "stepwell.v1.RecordService/PutRecords",
            Rpc::ListRecords => "stepwell.v1.RecordService/ListRecords",
            Rpc::DeleteRecords => "stepwell.v1.RecordService/DeleteRecords",
            Rpc::CopyTurn => "stepwell.v1.RecordService/CopyTurn",
            Rpc::CreateWait => "stepwell.v1.WaitService/CreateWait",
            Rpc::Signal => "stepwell.v1.WaitService/Signal",
            Rpc::Await => "stepwell.v1.WaitService/Await",
            Rpc::GetWait => "stepwell.v1.WaitService/GetWait",
            Rpc::ListWaits => "stepwell.v1.WaitService/ListWaits",
            Rpc::CancelWait => "stepwell.v1.WaitService/CancelWait",
            Rpc::PutItems => "stepwell.v1.MemoryService/PutItems",
            Rpc::GetItems => "stepwell.v1.MemoryService/GetItems",
            Rpc::SearchItems => "stepwell.v1.MemoryService/SearchItems",
            Rpc::ListPaths => "stepwell.v1.MemoryService/ListPaths",
            Rpc::DeleteItems => "stepwell.v1.MemoryService/DeleteItems",
        }
    }

    /// The least role that may call this RPC.
    pub fn role(self) -> Role {
        match self {
            Rpc::Restore | Rpc::ListTurns | Rpc::Get | Rpc::ListRecords => Role::Read,
            Rpc::Await | Rpc::GetWait | Rpc::ListWaits => Role::Read,
            Rpc::GetItems | Rpc::SearchItems | Rpc::ListPaths => Role::Read,
            // An agent's memory is its own work, as its records are.
            Rpc::PutItems | Rpc::DeleteItems => Role::Write,
            Rpc::CreateWait | Rpc::Signal | Rpc::CancelWait => Role::Write,
            Rpc::Checkpoint | Rpc::Begin | Rpc::Complete | Rpc::Release | Rpc::Extend => Role::Write,
            // Deleting and copying records is part of an application's own
            // work on its records (a graph's threads), unlike DeleteTurn.
            Rpc::PutRecords | Rpc::DeleteRecords | Rpc::CopyTurn => Role::Write,
            Rpc::DeleteTurn => Role::Admin,
        }
    }

    /// The RPC's name as the contract spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rpc::Checkpoint => "Checkpoint",
            Rpc::Restore => "Restore",
            Rpc::ListTurns => "ListTurns",
            Rpc::DeleteTurn => "DeleteTurn",
            Rpc::Begin => "Begin",
            Rpc::Complete => "Complete",
            Rpc::Release => "Release",
            Rpc::Extend => "Extend",
            Rpc::Get => "Get",
            Rpc::PutRecords => "PutRecords",
            Rpc::ListRecords => "ListRecords",
            Rpc::DeleteRecords => "DeleteRecords",
            Rpc::CopyTurn => "CopyTurn",
            Rpc::CreateWait => "CreateWait",
            Rpc::Signal => "Signal",
            Rpc::Await => "Await",
            Rpc::GetWait => "GetWait",
            Rpc::ListWaits => "ListWaits",
            Rpc::CancelWait => "CancelWait",
            Rpc::PutItems => "PutItems",
            Rpc::GetItems => "GetItems",
            Rpc::SearchItems => "SearchItems",
            Rpc::ListPaths => "ListPaths",
            Rpc::DeleteItems => "DeleteItems",
        }
    }
}

/// Why a caller is not known; none of these says more than the others to
/// the caller, but the log tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    NoCredentials,
    MalformedHeader,
    RepeatedHeader,
    UnknownToken,
}

impl Unknown {
    pub fn as_str(self) -> &'static str {
        match self {
            Unknown::NoCredentials => "no bearer token or client certificate",
            Unknown::MalformedHeader => "the authorization header is not \"Bearer <token>\"",
            Unknown::RepeatedHeader => "the request has more than one authorization header",
            Unknown::UnknownToken => "the bearer token is not known",
        }
    }
}
