package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** RESOURCE_EXHAUSTED / OVERLOADED: the sidecar's write queue is full; nothing was stored. */
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
