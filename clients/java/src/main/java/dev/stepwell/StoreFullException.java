package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * RESOURCE_EXHAUSTED / STORE_FULL: the sidecar's disk or SQLite size cap is full; nothing was
 * stored. Reads still work; writes succeed again only after an operator frees space (deletes
 * turns), so the client does not retry it.
 */
public class StoreFullException extends StepwellException {
  public StoreFullException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(code, message, reason, field, metadata, violations, cause);
  }
}
