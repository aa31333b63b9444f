package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** NOT_FOUND / KEY_NOT_FOUND: Get on an unknown key. */
public class KeyNotFoundException extends StepwellException {
  public KeyNotFoundException(
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
