// The two stores the saver's specs run against: a sidecar on a throwaway
// SQLite file, and one on the Postgres server STEPWELL_TEST_POSTGRES_URL
// names (test.sh runs the specs under scripts/with-postgres, which starts a
// throwaway cluster). Without that variable the specs fail: no backend is
// skipped quietly.
import { startSidecar, type Sidecar } from "../sidecar.js";

export type BackendName = "sqlite" | "postgres";
export const BACKENDS: BackendName[] = ["sqlite", "postgres"];

export function postgresUrl(): string {
  const url = process.env.STEPWELL_TEST_POSTGRES_URL;
  if (!url) throw new Error("STEPWELL_TEST_POSTGRES_URL is not set: run the LangGraph specs through test.sh (scripts/with-postgres)");
  return url;
}

export function startBackend(name: BackendName, extraArgs: string[] = []): Promise<Sidecar> {
  return startSidecar({ security: undefined, extraArgs, ...(name === "postgres" ? { databaseUrl: postgresUrl() } : {}) });
}
