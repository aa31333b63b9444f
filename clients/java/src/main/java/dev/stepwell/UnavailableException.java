package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** UNAVAILABLE: the store could not commit or the sidecar is unreachable. */
public class UnavailableException extends StepwellException {
  public UnavailableException(
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
