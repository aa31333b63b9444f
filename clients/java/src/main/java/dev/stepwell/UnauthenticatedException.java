package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * UNAUTHENTICATED: the call carried no token (or client certificate) the sidecar knows. Never
 * retried: the same credentials fail again.
 */
public class UnauthenticatedException extends StepwellException {
  public UnauthenticatedException(
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
