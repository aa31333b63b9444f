// Trace context on every call, when OpenTelemetry's API is installed.
//
// `@opentelemetry/api` is an optional peer dependency of the client. When the
// application has it installed (with an SDK that registers a context manager
// and a propagator), every call carries the active span's context, W3C
// `traceparent` (and `tracestate` when there is one), written by the API's
// global propagator, so the sidecar's server span of the call is a child of
// the caller's span.
//
// The package is looked up once, when this module loads, with require()
// from this file's location, so it is found wherever the application's
// node_modules has it. Loading its CommonJS build is enough even when the
// application imports the ES build: both keep their registered context
// manager and propagator in one process-wide slot. Without the package (or
// if it fails to load) `traceContextAvailable` is false, no interceptor is
// added to the transport, and calls cost nothing more than before. With it,
// a call made outside any span sends nothing: the propagator writes no
// header for an invalid span context.
//
// The interceptor reads the active context on each attempt of a call, in the
// caller's async context, so the retries of a call, once()'s heartbeats and
// the DurableExecutor's calls all carry the span that was active where they
// were made. A header the caller already set (in a call's `headers` or by one
// of its own interceptors) is left as it is.
import type { Interceptor } from "@connectrpc/connect";
import { requireOptional } from "./optional.cjs";

/** The part of `@opentelemetry/api` the client uses (kept local so the client's types never name the optional package). */
interface OpenTelemetryApi {
  context: { active(): unknown };
  propagation: { inject(context: unknown, carrier: Record<string, string>): void };
}

function loadOpenTelemetryApi(): OpenTelemetryApi | undefined {
  const api = requireOptional("@opentelemetry/api") as Partial<OpenTelemetryApi> | undefined;
  if (typeof api?.context?.active !== "function" || typeof api?.propagation?.inject !== "function") return undefined;
  return api as OpenTelemetryApi;
}

const otel = loadOpenTelemetryApi();

/** True when `@opentelemetry/api` could be loaded: the clients then send trace context (unless `traceContext: false`). */
export const traceContextAvailable: boolean = otel !== undefined;

/**
 * The trace context headers of the active context, as the global propagator
 * writes them (e.g. `{ traceparent: "00-…-…-01" }`); empty without
 * `@opentelemetry/api`, without a registered propagator, or outside any span.
 */
export function activeTraceHeaders(): Record<string, string> {
  if (otel === undefined) return {};
  const carrier: Record<string, string> = {};
  otel.propagation.inject(otel.context.active(), carrier);
  return carrier;
}

/**
 * A Connect interceptor that adds the active trace context to each request's
 * headers, leaving any header the request already has untouched. Without
 * `@opentelemetry/api` it adds nothing. `createStepwellTransport` puts it on
 * every transport it makes unless told `traceContext: false`; use it directly
 * only on a transport of your own.
 */
export const traceContextInterceptor: Interceptor = (next) => async (req) => {
  for (const [key, value] of Object.entries(activeTraceHeaders())) {
    if (!req.header.has(key)) req.header.set(key, value);
  }
  return next(req);
};
