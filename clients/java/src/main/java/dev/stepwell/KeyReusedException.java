package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** FAILED_PRECONDITION / KEY_REUSED: the key was begun with another fingerprint. */
public class KeyReusedException extends StepwellException {
  public KeyReusedException(
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
