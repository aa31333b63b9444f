package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * NOT_FOUND / WAIT_NOT_FOUND: Await, GetWait on a wait that does not exist (Signal and CancelWait
 * create it instead).
 */
public class WaitNotFoundException extends StepwellException {
  public WaitNotFoundException(
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
