package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * RESOURCE_EXHAUSTED / OVERLOADED: too many requests are in flight or the sidecar's write queue is
 * full; nothing was stored. Retried with backoff. A RESOURCE_EXHAUSTED with an unknown reason or
 * none is thrown as this class too; MESSAGE_TOO_LARGE and STORE_FULL have their own classes.
 */
public class OverloadedException extends StepwellException {
  public OverloadedException(
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
