package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * PERMISSION_DENIED: the caller is known but has no grant of the needed role for the request's
 * namespace. Never retried.
 */
public class PermissionDeniedException extends StepwellException {
  public PermissionDeniedException(
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
